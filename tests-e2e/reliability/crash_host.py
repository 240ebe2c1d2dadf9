"""A host that starts one real product run and then waits to be killed (run as a program).

``crash_host.py codex <base_url> <codex_home> <workspace> <task>`` or
``crash_host.py claude-code <base_url> <root> <workspace> <task>``: starts the run through the
provider (the loopback model server belongs to the test), prints ``started`` once ``start()``
returned, and sleeps (bounded) so the test can SIGKILL it mid-run. A seventh argument ``plain``
spawns without supervisors (dsh.subprocess's fallback), so the tree outlives the host.
"""

import asyncio
import sys
from pathlib import Path

from dsh.subagent import Descriptor, Parent, ResolvedStartRequest, TextBlock

LIFETIME_S = 60.0


def build_provider(kind: str, base_url: str, root: str, prewarm: int = 0):  # type: ignore[no-untyped-def]
    if kind == "codex":
        from dsh.subagent_codex import CodexProvider, CodexProviderConfig
        from dsh.subagent_codex.testing import hermetic_env

        config = CodexProviderConfig(
            env=hermetic_env(Path(root)),
            permission_mode="dangerously-bypass-approvals-and-sandbox",
            stderr="discard",
            prewarm=prewarm,
        )
        return CodexProvider(config)
    from dsh.subagent_claude_code import ClaudeCodeProvider, ClaudeCodeProviderConfig
    from dsh.subagent_claude_code.testing import hermetic_env as claude_env

    return ClaudeCodeProvider(
        ClaudeCodeProviderConfig(
            env=claude_env(Path(root), base_url), stderr="discard", prewarm=prewarm
        )
    )


async def main() -> None:
    kind, base_url, root, workspace, task = sys.argv[1:6]
    provider = build_provider(kind, base_url, root)
    request = ResolvedStartRequest(
        prompt=(TextBlock(task),),
        parent=Parent(session_id="crash-host", cwd=workspace),
        descriptor=Descriptor(provider=provider.name),
    )
    run = await provider.start(request)
    print("started", flush=True)
    await asyncio.sleep(LIFETIME_S)  # the test SIGKILLs us long before this
    await run.aclose()


if __name__ == "__main__":
    if sys.argv[6:] == ["plain"]:
        from dsh.subprocess import _process

        _process._SUPERVISED = False
    asyncio.run(main())
