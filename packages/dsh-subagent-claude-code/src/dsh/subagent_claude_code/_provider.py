"""``ClaudeCodeProvider``: checks, spawn through our transport, publication, rollback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from dsh.subagent import DemoPlan, ProductFailure, ResolvedStartRequest
from dsh.subagent.kit import FailureFacts, ProductInstall, ProviderBase, check_one_shot_request
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
from dsh.subagent_claude_code._mapping import PRODUCT
from dsh.subagent_claude_code._run import PREFIX, ClaudeCodeRun, StartupExit
from dsh.subagent_claude_code._run_dirs import sweep_lost_run_dirs_once
from dsh.subagent_claude_code._warm import WarmClaudeCode
from dsh.subagent_claude_code.config import ClaudeCodeProviderConfig
from dsh.subprocess import (
    Limits,
    SpawnSpec,
    SubprocessRuntime,
    default_runtime,
    limits_problem,
    reap_orphans_once,
)

__all__ = ["ClaudeCodeProvider"]

_log = logging.getLogger("dsh.subagent_claude_code")


def _start_failure(category: str = "unknown") -> ProductFailure:
    facts = FailureFacts(product=PRODUCT, stage="query-start", category=category)
    return ProductFailure.from_facts(PREFIX, facts)


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


class ClaudeCodeProvider(ProviderBase[ClaudeCodeProviderConfig]):
    """Runs one-shot tasks on the Claude Code CLI bundled in ``claude-agent-sdk``.

    Building a provider starts no process and does no PATH lookup; ``start()`` does the work.
    ``doctor()`` reports the pinned SDK, its bundled CLI and this instance's credentials.
    """

    config_class = ClaudeCodeProviderConfig
    install = _INSTALL

    def __init__(
        self,
        config: ClaudeCodeProviderConfig | None = None,
        *,
        runtime: SubprocessRuntime | None = None,
    ) -> None:
        super().__init__(config)
        self._runtime = runtime
        self._cli_command: Sequence[str] | None = None  # test-only seam (see .testing)
        self._warm = WarmClaudeCode(self.config, new_run=self._new_run, rollback=self._rollback)

    @staticmethod
    def demo() -> DemoPlan:
        """This product's part of ``dsh demo`` (``dsh.subagent.DemoPlan``); starts nothing."""
        # Imported on call: the loopback fixtures are not needed to run the product.
        from dsh.subagent_claude_code._demo import demo_plan

        return demo_plan()

    def credential_names(self, environ: Mapping[str, str]) -> list[str]:
        return forwarding(self.config).credential_names(environ)

    def forwarded_env_names(self) -> tuple[str, ...]:
        return forwarding(self.config).names()

    async def start(self, request: ResolvedStartRequest) -> ClaudeCodeRun:
        cwd, texts = check_one_shot_request(request, prefix=PREFIX, unusable_cwd=_start_failure)
        problem = limits_problem(Limits.of(self.config))
        if problem is not None:  # before anything is spawned, naming the field
            raise ProductFailure(
                f"{PREFIX}: {problem}; set limits_best_effort = true to run anyway"
            )
        await reap_orphans_once()
        sweep_lost_run_dirs_once()  # the run dirs dead owners left (a SIGKILLed host, say)
        argv = self._argv()
        if self.config.prewarm <= 0:
            return await self._start_cold(cwd, argv, texts)
        key = self._warm.key(cwd, argv)
        run = await self._warm.start(key, texts)
        if run is None:
            run = await self._start_cold(cwd, argv, texts)
        self._warm.pool.replenish_after(run.result(), key)  # once this run's result is in
        return run

    async def aclose(self) -> None:
        """Close this instance's warm processes (``prewarm``); later starts are cold. Idempotent.

        Runs already published are the caller's; they are not touched.
        """
        await self._warm.aclose()

    async def _new_run(
        self, cwd: str, argv: list[str], env: dict[str, str | None]
    ) -> ClaudeCodeRun:
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
        )
        return ClaudeCodeRun(self.config, spec, self._runtime or default_runtime(), run_dir)

    async def _start_cold(self, cwd: str, argv: list[str], texts: Sequence[str]) -> ClaudeCodeRun:
        env = child_env_overlay(self.config, cwd=cwd, tmp_dir=None, env_file=None)
        run = await self._new_run(cwd, argv, env)
        try:
            await run.spawn()
        except BaseException as error:
            await self._rollback(run, error)
            raise AssertionError("unreachable") from None
        return await self._publish(run, texts)

    async def _publish(self, run: ClaudeCodeRun, texts: Sequence[str]) -> ClaudeCodeRun:
        """Send the task through the SDK's query; return once the prompt is delivered."""
        try:
            run.begin(texts)
            await run.wait_ready()
        except BaseException as error:
            await self._rollback(run, error)
            raise AssertionError("unreachable") from None
        _log.debug("Claude Code run %s published", run.id)
        return run

    def _argv(self) -> list[str]:
        if self._cli_command is not None:
            return [*self._cli_command, *cli_argv("claude", self.config)[1:]]
        try:
            cli = bundled_cli()
        except PayloadMissing as error:
            _log.debug("Claude Code payload check failed", exc_info=True)
            raise _start_failure() from error
        return cli_argv(cli, self.config)

    async def _rollback(self, run: ClaudeCodeRun, error: BaseException) -> None:
        """Close the query, run the ladder, wait for whole-tree exit; then raise."""
        if isinstance(error, StartupExit):
            failure = ProductFailure.from_facts(PREFIX, run.startup_facts())
            cause: BaseException = run.startup_cause or error
        elif isinstance(error, Exception):
            failure, cause = _start_failure(), error
        else:
            failure, cause = None, error
        try:
            await run.aclose()
        except Exception as teardown:
            if isinstance(error, asyncio.CancelledError):
                # Cancelled, and exit was not proven: the teardown fact wins (as with Codex), so
                # a job killed while starting still shows it. The caller's task stays cancelling.
                raise teardown from teardown.__cause__
            if failure is None:
                raise error from teardown
            failure.__cause__ = cause
            message = f"{failure}; {teardown}"
            raise ExceptionGroup(message, [failure, teardown]) from None
        if failure is None:
            raise error
        _log.debug("Claude Code start failed", exc_info=cause)
        raise failure from cause
