"""``RelayProvider``: the kit's start algorithm on ``relay-agent`` processes."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import relay_agent

from dsh.subagent import DemoPlan, ResolvedStartRequest
from dsh.subagent.kit import Launch, ProductInstall, ProductProvider
from dsh.subagent_relay._env import RELAY_CONFIG_DIR_ENV, forwarding
from dsh.subagent_relay._mapping import PREFIX, PRODUCT
from dsh.subagent_relay._run import RelayRun
from dsh.subagent_relay._run_dirs import PRIVATE_DIR_TAG, make_private_home
from dsh.subagent_relay.config import RelayProviderConfig
from dsh.subprocess import (
    EnvForwarding,
    Limits,
    SpawnChecks,
    SpawnSpec,
    default_runtime,
)

__all__ = ["RelayProvider"]

_log = logging.getLogger("dsh.subagent_relay")

_INSTALL = ProductInstall(
    version_label="relay-agent version",
    distribution="relay-agent",
    payload_label="Relay payload",
    locate_payload=relay_agent.executable,
    config_dir_env=RELAY_CONFIG_DIR_ENV[0],
    default_config_dir=".relay",
    login_file="login.json",
    login_env=("RELAY_API_KEY",),
)


class RelayProvider(SpawnChecks, ProductProvider[RelayProviderConfig, RelayRun]):
    """Runs one-shot tasks on ``relay-agent`` (one process per task, JSON lines over stdio).

    Building one starts no process. ``start()`` (the kit's) spawns the agent, waits for its
    ``ready`` line and writes the task; with ``prewarm`` a warm process is one that said
    ``ready`` and waits for its task.
    """

    config_class = RelayProviderConfig
    install = _INSTALL
    prefix = PREFIX
    product = PRODUCT
    start_stage = "start"
    owned_dir_tag = PRIVATE_DIR_TAG
    log = _log

    def __init__(self, config: RelayProviderConfig | None = None) -> None:
        super().__init__(config)
        self._program: Sequence[str] | None = None  # test-only seam (see .testing)

    @staticmethod
    def demo() -> DemoPlan:
        """This product's part of ``dsh demo``; starts nothing."""
        from dsh.subagent_relay._demo import demo_plan

        return demo_plan()

    def env_forwarding(self) -> EnvForwarding:
        return forwarding(self.config)

    def launch(self, cwd: str, request: ResolvedStartRequest) -> Launch:
        if self._program is not None:
            argv = list(self._program)
        else:
            payload = relay_agent.executable()
            if not payload.is_file():
                raise self.start_failure("payload-missing")
            argv = [sys.executable, "-I", str(payload)]
        return argv, forwarding(self.config).overlay()

    async def new_run(self, cwd: str, argv: list[str], env: dict[str, str | None]) -> RelayRun:
        """A run, not yet spawned: its private home (under ``private``) is made here."""
        home = await make_private_home(self.config)
        spec = SpawnSpec(
            argv=argv,
            cwd=cwd,
            env=env if home is None else {**env, "HOME": home},
            stdin="pipe",
            stdout="pipe",
            stderr="inherit" if self.config.stderr == "forward" else "ignore",
            grace_ms=self.config.dispose_grace_ms,
            nice=self.config.nice,
            limits=Limits.of(self.config),
            owned_dir=home,  # removed after whole-tree exit
        )
        return RelayRun(spec, default_runtime())

    async def prepare_run(self, run: RelayRun, cwd: str, *, warm: bool) -> None:
        """Spawn the agent and wait for its ``ready`` line (cold and warm alike)."""
        await run.spawn()
        await run.wait_ready()
