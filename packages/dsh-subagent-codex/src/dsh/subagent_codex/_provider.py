"""``CodexProvider``: spawns the pinned ``codex app-server`` per run; publishes a ``CodexRun``."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Awaitable, Sequence
from typing import Any

from dsh.subagent import Capabilities, DemoPlan, ResolvedStartRequest
from dsh.subagent.kit import (
    Launch,
    ProductInstall,
    ProductProvider,
    installed_version,
    remove_off_loop,
    spawning_warm,
)
from dsh.subagent_codex._auth import (
    CONFIG_DIR_ENV,
    DEFAULT_CONFIG_DIR,
    LOGIN_FILE,
    AuthPlan,
    plan_auth,
)
from dsh.subagent_codex._env import forwarding, tool_env_override
from dsh.subagent_codex._first_start import first_start_guard
from dsh.subagent_codex._mapping import MODE_FIELDS, OPT_OUT_NOTIFICATIONS, PREFIX, PRODUCT
from dsh.subagent_codex._run import CodexRun
from dsh.subagent_codex._run_dirs import PRIVATE_DIR_TAG, make_private_dir, private_overlay
from dsh.subagent_codex._wire import MAX_LINE_BYTES
from dsh.subagent_codex.config import CODEX_CREDENTIAL_ENV, CodexProviderConfig
from dsh.subprocess import (
    EnvForwarding,
    Limits,
    SpawnChecks,
    SpawnError,
    SpawnSpec,
    default_runtime,
)

__all__ = ["CodexProvider"]

_log = logging.getLogger("dsh.subagent_codex")


@functools.cache
def _version(distribution: str, missing: str) -> str:
    found = installed_version(distribution)  # on the start path: one METADATA file, read alone
    if found is not None:
        return found
    from importlib import metadata

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


class CodexProvider(SpawnChecks, ProductProvider[CodexProviderConfig, CodexRun]):
    """The Codex one-shot subagent provider (entry point ``codex``).

    Construction and ``from_config`` start no process and do no PATH lookup or version probe.
    ``doctor()`` reports the pinned binary, its payload and this instance's credentials.
    ``start()`` is the kit's (``ProductProvider``); the hooks below are Codex's: the bundled
    binary, ``codex app-server`` with its handshake (``initialize``, the account check,
    ``thread/start``) and, under ``private`` isolation, a private home per process.

    A warm process (``prewarm = N``) has run every step but ``turn/start``. What Codex fixes per
    process is the warm key: the process cwd (Codex resolves what a thread leaves open against
    it), the argv, and the env overlay computed for the request (forwarded values included: a
    changed credential is a miss, never a stale process). Codex caches its credentials for the
    process's life, so a warm process whose home's login file changed since its spawn is retired
    (``CodexRun.warm_usable``).
    """

    config_class = CodexProviderConfig
    install = _INSTALL
    prefix = PREFIX
    product = PRODUCT
    #: ``output_schema``: mapped in ``_mapping`` (docs/structured-output.md).
    capabilities = Capabilities(output_schema=True)
    #: ``MAX_USER_INPUT_TEXT_CHARS`` (``1 << 20``) of Codex's app-server: ``turn/start`` sums the
    #: ``chars()`` of its text inputs and answers a longer one with JSON-RPC ``-32602``
    #: (measured on 0.163.0: 1,048,576 completes, 1,048,577 is refused).
    max_prompt_chars = 1_048_576
    start_stage = "initialize"
    owned_dir_tag = PRIVATE_DIR_TAG
    log = _log

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

    @staticmethod
    def demo() -> DemoPlan:
        """This product's part of ``dsh demo`` (``dsh.subagent.DemoPlan``); starts nothing."""
        # Imported on call: the loopback fixtures are not needed to run the product.
        from dsh.subagent_codex._demo import demo_plan

        return demo_plan()

    def env_forwarding(self) -> EnvForwarding:
        return forwarding(self.config)

    def __repr__(self) -> str:
        return f"CodexProvider(name={self.name!r}, mode={self.config.permission_mode!r})"

    def launch(self, cwd: str, request: ResolvedStartRequest) -> Launch:
        try:
            return self._argv_env()
        except (OSError, ImportError, ValueError) as exc:
            failure = self.start_failure()
            _log.info("%s", failure)
            raise failure from exc

    def _argv_env(self) -> Launch:
        env = forwarding(self.config).overlay()
        if self._program is not None:
            return ([*self._program, "app-server", "--listen", "stdio://"], env)
        program, path_dir = _locate()
        if path_dir is not None:
            base = env.get("PATH") or os.environ.get("PATH", "")
            env["PATH"] = f"{path_dir}{os.pathsep}{base}" if base else path_dir
        return ([program, "app-server", "--listen", "stdio://"], env)

    async def prepare_run(self, run: CodexRun, cwd: str, *, warm: bool) -> None:
        """``thread/start``: an ephemeral thread whose every field comes from the config and
        ``cwd`` (in the warm key), so a warm process needs only its task (``turn/start``)."""
        await run.start_thread(self._thread_params(cwd))

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

    async def new_run(self, cwd: str, argv: list[str], env: dict[str, str | None]) -> CodexRun:
        """Spawn ``codex app-server`` in ``cwd``, initialize it and settle its credentials.

        Under ``private`` isolation the process gets its own private dir (removed with it).
        Failures are the safe ``ProductFailure`` of their stage, after the tree has exited.
        """
        private_dir: str | None = None
        try:
            if self.config.isolation == "private":
                private_dir = await make_private_dir(self.config)
                env = {**env, **private_overlay(private_dir)}
            auth = plan_auth(env)
        except BaseException as exc:
            await _remove_private_dir(private_dir)
            if not isinstance(exc, (OSError, ImportError, ValueError)):
                raise
            failure = self.start_failure()
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
            await self.rollback(run, exc)

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
                busy=not spawning_warm(),  # a warm process's start-up lowers no run in flight
            )
            proc = await default_runtime().spawn(spec)
        except BaseException as exc:
            await _remove_private_dir(private_dir)
            if not isinstance(exc, (OSError, ImportError, SpawnError, ValueError)):
                raise
            failure = self.start_failure()
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
