"""``ClaudeCodeProvider``: the kit's start algorithm on the CLI spawned through our transport."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dsh.subagent import Capabilities, DemoPlan, ResolvedStartRequest
from dsh.subagent.kit import Launch, ProductInstall, ProductProvider, spawning_warm
from dsh.subagent_claude_code import _command
from dsh.subagent_claude_code._command import (
    PayloadMissing,
    bundled_cli,
    child_env_overlay,
    cli_argv,
    run_dir_overlay,
)
from dsh.subagent_claude_code._env import (
    CLAUDE_CONFIG_DIR_ENV,
    forwarding,
    prepare_run_dir,
    private_home_overlay,
    private_settings_file,
)
from dsh.subagent_claude_code._mapping import PREFIX, PRODUCT, request_flags
from dsh.subagent_claude_code._run_dirs import RUN_DIR_TAG
from dsh.subagent_claude_code.config import ClaudeCodeProviderConfig
from dsh.subprocess import (
    EnvForwarding,
    Limits,
    SpawnChecks,
    SpawnSpec,
    SubprocessRuntime,
    default_runtime,
)

if TYPE_CHECKING:
    # The run (and with it claude-agent-sdk, which imports the MCP SDK) is imported when a run
    # is made, not when the provider is built: `dsh mcp` lists the tools before then.
    from dsh.subagent_claude_code._run import ClaudeCodeRun

__all__ = ["ClaudeCodeProvider"]

_log = logging.getLogger("dsh.subagent_claude_code")


_INSTALL = ProductInstall(
    version_label="claude-agent-sdk version",
    distribution="claude-agent-sdk",
    payload_label="Claude Code payload",
    locate_payload=lambda: _command.bundled_cli(),  # looked up per call (tests replace it)
    config_dir_env=CLAUDE_CONFIG_DIR_ENV[0],
    default_config_dir=".claude",
    login_file=".credentials.json",
    login_env=("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"),
    login_command="claude auth login",
)


#: Env names that choose the CLI's model (``ANTHROPIC_MODEL``, ``ANTHROPIC_DEFAULT_*_MODEL``,
#: ``ANTHROPIC_SMALL_FAST_MODEL``): with one set, the measured prompt bound may not hold.
_MODEL_ENV_PREFIXES = ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_", "ANTHROPIC_SMALL_FAST_MODEL")


class ClaudeCodeProvider(SpawnChecks, ProductProvider[ClaudeCodeProviderConfig, "ClaudeCodeRun"]):
    """Runs one-shot tasks on the Claude Code CLI bundled in ``claude-agent-sdk``.

    Building a provider starts no process and does no PATH lookup; ``start()`` (the kit's
    ``ProductProvider``) does the work on the hooks below: the bundled CLI's argv, a run dir per
    process, the spawn through our transport.
    ``doctor()`` reports the pinned SDK, its bundled CLI and this instance's credentials.

    A warm process (``prewarm = N``) is a run whose transport has spawned the CLI and sent it the
    ``initialize`` control request the SDK's ``query()`` sends (``WARM_INITIALIZE``); a start that
    takes one runs the SDK query on it (the SDK's own ``initialize`` is answered at once, then the
    task is written). The CLI fixes its cwd (and ``PWD``), argv and env at spawn: these are the
    warm key. The per-process run dir (private ``TMPDIR``, the Bash-tool env script) is not part
    of the key: each warm process gets its own, removed with it.
    """

    config_class = ClaudeCodeProviderConfig
    install = _INSTALL
    prefix = PREFIX
    product = PRODUCT
    #: Both mapped in ``_mapping.request_flags``: ``output_schema`` (docs/structured-output.md)
    #: and ``max_cost_usd``, the CLI's own ``--max-budget-usd``.
    capabilities = Capabilities(output_schema=True, cost_limit=True)
    #: The pinned CLI refuses, before any model request, a first request whose estimated tokens
    #: reach its default model's window less its reserve ("Prompt is too long", ending as
    #: ``category: connection``); the estimate counts UTF-16 code units of the whole request
    #: (the prompt, the cwd, the context the CLI adds). The bound measured with the shortest
    #: cwd (``/``) and private isolation: 2,920,996 units complete, 2,920,997 fail; a longer
    #: cwd or more context lowers the real bound, so a prompt over this one surely fails
    #: (docs/structured-output.md). It holds for the CLI's default model only
    #: (:meth:`prompt_limit`).
    max_prompt_chars = 2_920_996
    prompt_unit = "UTF-16 code units"
    start_stage = "query-start"
    owned_dir_tag = RUN_DIR_TAG
    log = _log

    def __init__(
        self,
        config: ClaudeCodeProviderConfig | None = None,
        *,
        runtime: SubprocessRuntime | None = None,
    ) -> None:
        super().__init__(config)
        self._runtime = runtime
        self._cli_command: Sequence[str] | None = None  # test-only seam (see .testing)

    @staticmethod
    def demo() -> DemoPlan:
        """This product's part of ``dsh demo`` (``dsh.subagent.DemoPlan``); starts nothing."""
        # Imported on call: the loopback fixtures are not needed to run the product.
        from dsh.subagent_claude_code._demo import demo_plan

        return demo_plan()

    def env_forwarding(self) -> EnvForwarding:
        return forwarding(self.config)

    def prompt_limit(self) -> int | None:
        """The measured bound, when the run is the one it was measured for: the CLI's default
        model (no ``model``, no model named in the env) under private isolation (no user or
        project settings choosing one). Another model's window may take more: no early
        refusal then."""
        if self.config.model is not None or self.config.isolation != "private":
            return None
        names = {*self.config.env, *self.config.inherit_env}
        if any(name.startswith(_MODEL_ENV_PREFIXES) for name in names):
            return None
        return self.max_prompt_chars

    def prompt_size(self, text: str) -> int:
        """UTF-16 code units, as the CLI's estimate counts (an emoji is two)."""
        return len(text.encode("utf-16-le")) // 2

    def launch(self, cwd: str, request: ResolvedStartRequest) -> Launch:
        env = child_env_overlay(self.config, cwd=cwd, tmp_dir=None, env_file=None)
        return ([*self._argv(), *request_flags(request)], env)

    def _argv(self) -> list[str]:
        if self._cli_command is not None:
            return [*self._cli_command, *cli_argv("claude", self.config)[1:]]
        try:
            cli = bundled_cli()
        except PayloadMissing as error:
            _log.debug("Claude Code payload check failed", exc_info=True)
            raise self.start_failure() from error
        return cli_argv(cli, self.config)

    async def new_run(self, cwd: str, argv: list[str], env: dict[str, str | None]) -> ClaudeCodeRun:
        """A run (not yet spawned) for ``argv`` in ``cwd``, with its own run dir."""
        # One run-owned dir (removed with the run): the private TMPDIR when enabled, and always
        # the home of the Bash-tool env script.
        # Under private isolation it also holds the private HOME and CLAUDE_CONFIG_DIR.
        made = await prepare_run_dir(self.config)
        run_dir, env_file = made.path, made.env_file
        tmp_dir = run_dir if self.config.private_tmp else None
        settings = private_settings_file(self.config, run_dir)
        if settings is not None:
            argv = [*argv, "--settings", settings]
        private = private_home_overlay(self.config, run_dir)
        spec = SpawnSpec(
            argv=argv,
            cwd=cwd,
            env={**env, **run_dir_overlay(tmp_dir, env_file), **private},
            stdin="pipe",
            stdout="pipe",
            # As the SDK's own transport does: the CLI writes to the host's fd 2 itself (or to
            # the null device), so the host never reads, relays or wakes up for product stderr.
            stderr="inherit" if self.config.stderr == "forward" else "ignore",
            grace_ms=self.config.dispose_grace_ms,
            nice=self.config.nice,
            limits=Limits.of(self.config),
            owned_dir=run_dir,  # removed after whole-tree exit, by the supervisor where it can
            owned_files=made.files,  # and, outside private isolation, made by it too
            busy=not spawning_warm(),  # a warm process's start-up lowers no run in flight
        )
        from dsh.subagent_claude_code._run import ClaudeCodeRun

        return ClaudeCodeRun(self.config, spec, self._runtime or default_runtime(), run_dir)

    async def prepare_run(self, run: ClaudeCodeRun, cwd: str, *, warm: bool) -> None:
        """Spawn the CLI; a warm one also does its ``initialize`` exchange ahead of any request."""
        await run.spawn()
        if warm:
            await run.preinitialize()
