"""A host that starts one real product run and then waits to be killed (run as a program).

``crash_host.py codex <base_url> <codex_home> <workspace> <task>`` or
``crash_host.py claude-code <base_url> <root> <workspace> <task>``: starts the run through the
provider (the loopback model server belongs to the test), prints ``started`` once ``start()``
returned, and sleeps (bounded) so the test can SIGKILL it mid-run. Further arguments: ``plain``
spawns without supervisors (dsh.subprocess's fallback), so the tree outlives the host;
``private`` runs under ``isolation = "private"`` (for Codex ``<codex_home>`` is then the
``home_template``); ``complete`` waits for the run's result and prints ``done <stop reason>``.
"""

import asyncio
import sys
from pathlib import Path
from typing import Any

from dsh.subagent import Descriptor, Parent, ResolvedStartRequest, TextBlock

LIFETIME_S = 60.0


PRIVATE_HOME_NAMES = ("HOME", "CODEX_HOME", "CODEX_SQLITE_HOME", "CLAUDE_CONFIG_DIR")


def build_provider(kind: str, base_url: str, root: str, prewarm: int = 0, private: bool = False):  # type: ignore[no-untyped-def]
    isolation: dict[str, Any] = {"isolation": "private"} if private else {}

    def env_of(env: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in env.items() if not (private and k in PRIVATE_HOME_NAMES)}

    if kind == "codex":
        from dsh.subagent_codex import CodexProvider, CodexProviderConfig
        from dsh.subagent_codex.testing import hermetic_env

        template: dict[str, Any] = {"home_template": root} if private else {}
        config = CodexProviderConfig(
            env=env_of(hermetic_env(Path(root))),
            permission_mode="dangerously-bypass-approvals-and-sandbox",
            stderr="discard",
            prewarm=prewarm,
            **isolation,
            **template,
        )
        return CodexProvider(config)
    from dsh.subagent_claude_code import ClaudeCodeProvider, ClaudeCodeProviderConfig
    from dsh.subagent_claude_code.testing import hermetic_env as claude_env

    return ClaudeCodeProvider(
        ClaudeCodeProviderConfig(
            env=env_of(claude_env(Path(root), base_url)),
            stderr="discard",
            prewarm=prewarm,
            **isolation,
        )
    )


async def main() -> None:
    kind, base_url, root, workspace, task = sys.argv[1:6]
    flags = sys.argv[6:]
    provider = build_provider(kind, base_url, root, private="private" in flags)
    request = ResolvedStartRequest(
        prompt=(TextBlock(task),),
        parent=Parent(session_id="crash-host", cwd=workspace),
        descriptor=Descriptor(provider=provider.name),
    )
    run = await provider.start(request)
    print("started", flush=True)
    if "complete" in flags:
        async with run:
            result = await run.result()
        print("done", result.stop_reason.value, flush=True)
        return
    await asyncio.sleep(LIFETIME_S)  # the test SIGKILLs us long before this
    await run.aclose()


if __name__ == "__main__":
    if "plain" in sys.argv[6:]:
        from dsh.subprocess import _spawn

        _spawn._SUPERVISED = False
    asyncio.run(main())
