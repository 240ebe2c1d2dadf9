"""``CodexProvider``: spawns the pinned ``codex app-server`` per run; publishes a ``CodexRun``."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from importlib import metadata
from typing import Any

from dsh.subagent import DemoPlan, ProductFailure, ResolvedStartRequest
from dsh.subagent.kit import (
    FailureFacts,
    ProductInstall,
    ProviderBase,
    check_one_shot_request,
    remove_off_loop,
)
from dsh.subagent_codex._auth import (
    CONFIG_DIR_ENV,
    DEFAULT_CONFIG_DIR,
    LOGIN_FILE,
    AuthPlan,
    plan_auth,
)
from dsh.subagent_codex._config import CODEX_CREDENTIAL_ENV, CodexProviderConfig
from dsh.subagent_codex._env import forwarding, tool_env_override
from dsh.subagent_codex._first_start import first_start_guard
from dsh.subagent_codex._mapping import MODE_FIELDS, OPT_OUT_NOTIFICATIONS, PREFIX, PRODUCT
from dsh.subagent_codex._private import (
    make_private_dir,
    private_overlay,
    sweep_lost_private_dirs_once,
)
from dsh.subagent_codex._run import CodexRun
from dsh.subagent_codex._turn import StartupFailure
from dsh.subagent_codex._warm import CodexSteps, WarmCodex
from dsh.subagent_codex._wire import MAX_LINE_BYTES
from dsh.subprocess import (
    Limits,
    SpawnError,
    SpawnSpec,
    TeardownError,
    default_runtime,
    limits_problem,
    reap_orphans_once,
)

__all__ = ["CodexProvider"]

_log = logging.getLogger("dsh.subagent_codex")


@functools.cache
def _version(distribution: str, missing: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return missing


def _product_version() -> str:
    return _version("openai-codex-cli-bin", "unknown")


def _client_version() -> str:
    return _version("dsh-subagent-codex", "0")


def _locate() -> tuple[str, str | None]:
    """The bundled codex binary and the bundled PATH dir (never a PATH lookup)."""
    import codex_cli_bin

    program = str(codex_cli_bin.bundled_codex_path())
    extra = codex_cli_bin.bundled_path_dir()
    return (program, None if extra is None else str(extra))


def _client_info() -> dict[str, Any]:
    return {"name": "dsh", "title": "dsh", "version": _client_version()}


def _capabilities() -> dict[str, Any]:
    return {"experimentalApi": False, "optOutNotificationMethods": list(OPT_OUT_NOTIFICATIONS)}


def _reject(message: str) -> ProductFailure:
    return ProductFailure(f"{PREFIX}: {message}")


def _failure(stage: str) -> ProductFailure:
    return ProductFailure.from_facts(PREFIX, FailureFacts(PRODUCT, stage, "unknown"))


async def _remove_private_dir(private_dir: str | None) -> None:
    """A private dir whose process never started goes at once (its run never owned it)."""
    if private_dir is not None:
        await remove_off_loop(private_dir)


_INSTALL = ProductInstall(
    version_label="Codex version",
    distribution="openai-codex-cli-bin",
    payload_label="Codex payload",
    locate_payload=lambda: _locate()[0],
    config_dir_env=CONFIG_DIR_ENV,
    default_config_dir=DEFAULT_CONFIG_DIR,
    login_file=LOGIN_FILE,
    login_env=CODEX_CREDENTIAL_ENV,
    login_command="codex login",
)


class CodexProvider(ProviderBase[CodexProviderConfig]):
    """The Codex one-shot subagent provider (entry point ``codex``).

    Construction and ``from_config`` start no process and do no PATH lookup or version probe.
    ``doctor()`` reports the pinned binary, its payload and this instance's credentials.
    """

    config_class = CodexProviderConfig
    install = _INSTALL

    def __init__(
        self,
        config: CodexProviderConfig | None = None,
        *,
        _program: Sequence[str] | None = None,
        _max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        # ``_program`` / ``_max_line_bytes`` are a test-only seam (scripted stand-ins). They are not
        # config fields, so profiles and ``from_config`` can never reach them.
        super().__init__(config)
        self._program = tuple(_program) if _program is not None else None
        self._max_line = _max_line_bytes
        steps = CodexSteps(
            argv_env=self._argv_env,
            spawn=self._spawn,
            thread_params=self._thread_params,
            publish=self._publish,
        )
        self._warm = WarmCodex(self.config.prewarm, steps)

    @staticmethod
    def demo() -> DemoPlan:
        """This product's part of ``dsh demo`` (``dsh.subagent.DemoPlan``); starts nothing."""
        # Imported on call: the loopback fixtures are not needed to run the product.
        from dsh.subagent_codex._demo import demo_plan

        return demo_plan()

    def credential_names(self, environ: Mapping[str, str]) -> list[str]:
        return forwarding(self.config).credential_names(environ)

    def forwarded_env_names(self) -> tuple[str, ...]:
        return forwarding(self.config).names()

    def __repr__(self) -> str:
        return f"CodexProvider(name={self.name!r}, mode={self.config.permission_mode!r})"

    async def start(self, request: ResolvedStartRequest) -> CodexRun:
        cwd, texts = check_one_shot_request(
            request, prefix=PREFIX, unusable_cwd=lambda: _failure("initialize")
        )
        problem = limits_problem(Limits.of(self.config))
        if problem is not None:  # before anything is spawned, naming the field
            raise ProductFailure(
                f"{PREFIX}: {problem}; set limits_best_effort = true to run anyway"
            )
        await reap_orphans_once()
        sweep_lost_private_dirs_once()  # private homes dead owners left (any instance's)
        key = self._warm.key(cwd) if self.config.prewarm > 0 else None
        if key is None:
            return await self._spawn_and_publish(cwd, list(texts))
        run = await self._warm.start(key, list(texts))
        if run is None:
            run = await self._spawn_and_publish(cwd, list(texts))
        self._warm.pool.replenish_after(run.result(), key)  # once this run's result is in
        return run

    async def aclose(self) -> None:
        """Close this instance's warm processes (``prewarm``); later starts are cold. Idempotent.

        Runs already published are the caller's; they are not touched.
        """
        await self._warm.aclose()

    def _argv_env(self) -> tuple[list[str], dict[str, str | None]]:
        env = forwarding(self.config).overlay()
        if self._program is not None:
            return ([*self._program, "app-server", "--listen", "stdio://"], env)
        program, path_dir = _locate()
        if path_dir is not None:
            base = env.get("PATH") or os.environ.get("PATH", "")
            env["PATH"] = f"{path_dir}{os.pathsep}{base}" if base else path_dir
        return ([program, "app-server", "--listen", "stdio://"], env)

    async def _spawn_and_publish(self, cwd: str, texts: list[str]) -> CodexRun:
        run = await self._spawn(cwd, self._argv_env)
        try:
            await run.start_thread(self._thread_params(cwd))
        except BaseException as exc:
            await self._rollback(run, exc)
            raise  # unreachable: _rollback always raises
        return await self._publish(run, texts)

    async def _publish(self, run: CodexRun, texts: list[str]) -> CodexRun:
        try:
            run.begin_turn(texts)
        except BaseException as exc:
            await self._rollback(run, exc)
            raise
        return run

    def _thread_params(self, cwd: str) -> dict[str, Any]:
        config = self.config
        thread: dict[str, Any] = {
            "cwd": cwd,
            "ephemeral": True,
            "config": tool_env_override(config),
        }
        if config.model is not None:
            thread["model"] = config.model
        thread.update(MODE_FIELDS[config.permission_mode])
        return thread

    async def _spawn(
        self, cwd: str, argv_env: Callable[[], tuple[list[str], dict[str, str | None]]]
    ) -> CodexRun:
        """Spawn ``codex app-server`` in ``cwd``, initialize it and settle its credentials.

        Under ``private`` isolation the process gets its own private dir (removed with it).
        Failures are the safe ``ProductFailure`` of their stage, after the tree has exited.
        """
        private_dir: str | None = None
        try:
            argv, env = argv_env()
            if self.config.isolation == "private":
                private_dir = await make_private_dir(self.config)
                env = {**env, **private_overlay(private_dir)}
            auth = plan_auth(env)
        except BaseException as exc:
            await _remove_private_dir(private_dir)
            if not isinstance(exc, (OSError, ImportError, ValueError)):
                raise
            failure = _failure("initialize")
            _log.info("%s", failure)
            raise failure from exc
        # The auth args go before the subcommand: ``codex [-c ...] app-server --listen stdio://``.
        argv = [*argv[:-3], *auth.extra_args, *argv[-3:]]
        guard = (
            first_start_guard(auth.home, _product_version())
            if self._program is None and private_dir is None
            # A scripted stand-in creates no state databases; a private home has one process.
            else contextlib.nullcontext()
        )
        async with guard:
            run = await self._spawn_process(cwd, argv, env, auth, private_dir)
            await self._or_rollback(run, run.initialize(_client_info(), _capabilities()))
        await self._or_rollback(run, run.authenticate(auth.key(env)))
        return run

    async def _or_rollback(self, run: CodexRun, step: Awaitable[None]) -> None:
        """Await a start-up step; on any failure bring the tree to exit and raise the safe error."""
        try:
            await step
        except BaseException as exc:
            await self._rollback(run, exc)
            raise  # unreachable: _rollback always raises

    async def _spawn_process(
        self,
        cwd: str,
        argv: list[str],
        env: dict[str, str | None],
        auth: AuthPlan,
        private_dir: str | None,
    ) -> CodexRun:
        config = self.config
        try:
            spec = SpawnSpec(
                argv=argv,
                cwd=cwd,
                env=env,
                stdin="pipe",
                stdout="pipe",
                stderr="inherit" if config.stderr == "forward" else "ignore",
                grace_ms=config.dispose_grace_ms,
                nice=config.nice,
                limits=Limits.of(config),
            )
            proc = await default_runtime().spawn(spec)
        except BaseException as exc:
            await _remove_private_dir(private_dir)
            if not isinstance(exc, (OSError, ImportError, SpawnError, ValueError)):
                raise
            failure = _failure("initialize")
            _log.info("%s", failure)
            raise failure from exc
        return CodexRun(
            proc,
            mode=config.permission_mode,
            grace_s=config.dispose_grace_ms / 1000.0,
            max_line=self._max_line,
            auth=auth,
            private_dir=private_dir,
        )

    async def _rollback(self, run: CodexRun, exc: BaseException) -> None:
        if isinstance(exc, StartupFailure):
            primary: BaseException = ProductFailure.from_facts(PREFIX, exc.facts)
            primary.__cause__ = exc.__cause__ or exc
        elif isinstance(exc, Exception):
            primary = _failure("initialize")
            primary.__cause__ = exc
        else:
            primary = exc  # CancelledError and friends propagate after the rollback
        try:
            await run.rollback()
        except TeardownError as teardown_exc:
            teardown = _failure("teardown")
            teardown.__cause__ = teardown_exc
            if isinstance(primary, Exception):
                _log.info("%s", primary)
                raise ExceptionGroup(f"{primary}; {teardown}", [primary, teardown]) from None
            raise teardown from teardown_exc
        except BaseException:
            if isinstance(primary, Exception):
                raise primary from primary.__cause__
            raise
        if isinstance(primary, Exception):
            _log.info("%s", primary)
        raise primary
