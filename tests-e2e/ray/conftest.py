"""One local Ray cluster for every Ray test: a head and two worker nodes, token auth on.

The head runs no job (it declares no ``dsh_node``), so a worker node can be removed under a
running job; each worker node declares one ``dsh_node``. Ray's temporary directory (sessions,
logs) is under a pytest temporary directory, the dashboard is off, and the cluster is shut down
at the end of the session. The test process is the Ray driver (``ray.init`` once); a Ray test
that cannot run fails. Test modules share the cluster and helpers through the ``ray_kit``
fixture; they never import this file.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

# Before Ray is imported (it reads this once): workers use this environment as installed, not a
# copy of the worktree that Ray would package because pytest runs under `uv run`.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import ray
from otel_capture import SPAN_DIR_ENV
from ray._private import ray_constants
from ray._private.authentication_test_utils import reset_auth_token_state
from ray.cluster_utils import Cluster

from dsh.jobs import JobRegistry, JobsConfig, JobSnapshot
from dsh.subagent_claude_code.testing import Behaviour, FakeMessagesServer
from dsh.subagent_claude_code.testing import RecordedRequest as ClaudeRequest
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex.testing import (
    FakeResponsesServer,
    FunctionCallItem,
    MessageItem,
    RecordedRequest,
    Reply,
    Stall,
    Trickle,
    hermetic_env,
    write_codex_home,
)
from dsh.subprocess import TREE_MARKER_ENV, marked_processes
from dsh.subprocess.testing import describe_processes
from dsh.tool_subagent import Caller, Harness

#: A credential only the worker nodes' environment holds (set before the nodes start). The
#: profile names it (``credential_env``); its value must never pass through Ray.
CANARY_ENV = "CANARY_OPENAI_KEY"
CANARY = "sk-canary-" + secrets.token_hex(12)
RUNS_PER_NODE = 3
NODE_RESOURCE = "dsh_node"
#: Every node listens on the loopback interface only.
LOOPBACK = "127.0.0.1"
#: The repository's tools/ (test helpers a worker process imports, such as otel_capture).
TOOLS_DIR = Path(__file__).resolve().parents[2] / "tools"


def _raylet_pids(node: Any) -> set[int]:
    return {info.process.pid for info in node.all_processes.get("raylet", [])}


def _ancestors(pid: int) -> set[int]:
    found = set()
    try:
        process: psutil.Process | None = psutil.Process(pid)
        while process is not None and process.pid > 1:
            found.add(process.pid)
            process = process.parent()
    except psutil.Error:
        pass
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


@dataclass
class RayKit:
    """The cluster and the checks the Ray tests share."""

    cluster: Cluster
    temp_dir: Path
    token: str
    #: The head's Ray Client server (``ray://127.0.0.1:<client_port>``).
    client_port: int
    workers: list[Any] = field(default_factory=list)
    canary_env: str = CANARY_ENV
    canary: str = CANARY
    runs_per_node: int = RUNS_PER_NODE

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    @property
    def client_address(self) -> str:
        return f"ray://{LOOPBACK}:{self.client_port}"

    def client_servers(self) -> set[str]:
        """The log files of the servers the head's Ray Client server started, one per client
        connection (``ray_client_server_<port>.err``)."""
        logs = self.temp_dir / "ray" / "session_latest" / "logs"
        return {path.name for path in logs.glob("ray_client_server_*.err")}

    def driver_env(self) -> dict[str, str]:
        """What a ``dsh`` command needs to be a driver of this cluster (``address = "auto"``)."""
        names = [
            *("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_TMPDIR", "RAY_USAGE_STATS_ENABLED"),
            *("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_ENABLE_UV_RUN_RUNTIME_ENV"),
        ]
        return {"RAY_ADDRESS": self.address, **{name: os.environ[name] for name in names}}

    def add_worker(self) -> Any:
        node = self.cluster.add_node(
            num_cpus=1, resources={NODE_RESOURCE: 1}, node_ip_address=LOOPBACK
        )
        self.workers.append(node)
        self.cluster.wait_for_nodes()
        return node

    def remove_worker(self, node: Any) -> None:
        self.workers.remove(node)
        self.cluster.remove_node(node, allow_graceful=False)

    def worker_of(self, node_id: str) -> Any:
        (node,) = [n for n in self.workers if n.node_id == node_id]
        return node

    def cluster_marked(self) -> list[int]:
        """Marked processes (own walk of ``/proc`` environs) of this cluster's nodes: a tree
        owned by a process below one of our raylets, or by an owner that is gone."""
        raylets = set().union(*(_raylet_pids(n) for n in [self.cluster.head_node, *self.workers]))
        found = []
        for pid in marked_processes():
            try:
                marker = psutil.Process(pid).environ().get(TREE_MARKER_ENV, "")
            except psutil.Error:
                continue
            owner = marker.split(":", 1)[0]
            gone = not owner.isdigit() or not psutil.pid_exists(int(owner))
            if gone or _ancestors(int(owner)) & raylets:
                found.append(pid)
        return sorted(found)

    @contextmanager
    def nodes_running_marked(self) -> Iterator[set[str]]:
        """While inside, samples (in a thread, every 50 ms) the nodes with a marked process below
        their raylet; yields the set of their node ids, complete once the block has ended."""
        raylets = {
            pid: node.node_id
            for node in [self.cluster.head_node, *self.workers]
            for pid in _raylet_pids(node)
        }
        nodes: set[str] = set()
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.05):
                for pid in marked_processes():
                    nodes.update(raylets[p] for p in _ancestors(pid) if p in raylets)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            yield nodes
        finally:
            stop.set()
            thread.join(5)

    def assert_no_marked(self, settle_s: float = 5.0) -> None:
        deadline = time.monotonic() + settle_s
        while (left := self.cluster_marked()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert left == [], f"marked processes outlived their jobs: {describe_processes(left)}"

    @staticmethod
    def registry(**jobs: Any) -> JobRegistry:
        config = {"executor": "ray", "max_runs_per_node": RUNS_PER_NODE, **jobs}
        return JobRegistry(JobsConfig.model_validate(config))

    @staticmethod
    def where(snapshot: JobSnapshot) -> str:
        assert snapshot.where is not None, snapshot
        return snapshot.where

    @property
    def node_tmp(self) -> Path:
        """The nodes' ``TMPDIR``: their products' run dirs live here, not in the shared ``/tmp``,
        where any other dsh process on the machine would sweep a lost one before a test sees it."""
        return self.temp_dir / "tmp"

    def lost_run_dirs(self) -> list[Path]:
        """Claude Code run dirs (``dsh-claude-<pid>-*``) whose owner process is gone."""
        found = []
        for path in self.node_tmp.glob("dsh-claude-*-*"):
            pid = path.name.split("-")[2]
            if pid.isdigit() and not psutil.pid_exists(int(pid)):
                found.append(path)
        return found

    @staticmethod
    def remove(paths: list[Path]) -> None:
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)

    def files_holding(self, needle: bytes) -> list[str]:
        """Files under Ray's temporary directory (logs, session data) that contain ``needle``."""
        hits = []
        for path in self.temp_dir.rglob("*"):
            try:
                if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
                    hits.append(str(path.relative_to(self.temp_dir)))
            except OSError:
                continue
        return hits


@pytest.fixture(scope="session")
def ray_kit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayKit]:
    temp_dir = tmp_path_factory.mktemp("ray")
    token = secrets.token_hex(32)
    saved = dict(os.environ)
    # The nodes start from this environment: token auth on, no usage reporting, and the canary
    # credential, which thereby exists only in the environment of each node's processes.
    os.environ.update(
        {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": token,
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_TMPDIR": str(temp_dir),
            "TMPDIR": str(temp_dir / "tmp"),  # RayKit.node_tmp
            # Ray's own switch for "no multi-host cluster": every process (nodes, drivers,
            # workers) then takes 127.0.0.1 as its node address instead of the host's IP.
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            # The machine is shared: Ray's own OOM killer would stop a job's worker because of
            # another program's memory, which is no failure of the code under test.
            "RAY_memory_monitor_refresh_ms": "0",
            CANARY_ENV: CANARY,
            # A worker setup step in tools/otel_capture.py writes the workers' spans here.
            SPAN_DIR_ENV: str(temp_dir / "spans"),
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(TOOLS_DIR), os.environ.get("PYTHONPATH", "")])
            ),
        }
    )
    (temp_dir / "spans").mkdir()
    (temp_dir / "tmp").mkdir()
    # Ray read RAY_AUTH_MODE when it was imported; its own test helper re-reads the config.
    reset_auth_token_state()
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)  # read at import, like above
    (temp_dir / "ray").mkdir()
    client_port = _free_port()
    head = {
        "num_cpus": 1,
        "include_dashboard": False,
        "temp_dir": str(temp_dir / "ray"),
        "node_ip_address": LOOPBACK,
        # The head's Ray Client server (bound to the node address), for address = "ray://...".
        "ray_client_server_port": client_port,
    }
    cluster = Cluster(initialize_head=True, head_node_args=head)
    kit = RayKit(cluster=cluster, temp_dir=temp_dir, token=token, client_port=client_port)
    try:
        for _ in range(2):
            kit.add_worker()
        ray.init(address=cluster.address, log_to_driver=False, namespace="dsh-tests")
        yield kit
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]
        # The session's leak guard watches the shared /tmp; the nodes' own is checked here.
        left = sorted(path.name for path in (temp_dir / "tmp").glob("dsh-*"))
        os.environ.clear()
        os.environ.update(saved)
        reset_auth_token_state()
        monkeypatch.undo()
    assert left == [], f"temporary dirs outlived the Ray nodes: {left}"


@dataclass
class Setup:
    """The loopback model servers, a workspace and a profile for both products (``setup``)."""

    codex: FakeResponsesServer
    claude: FakeMessagesServer
    workspace: Path
    profile: dict[str, Any]
    caller: Caller
    runs_per_node: int

    def harness(self, tools: list[dict[str, Any]] | None = None, **jobs: Any) -> Harness:
        """A harness on the Ray executor; ``tools``: its ``[[tool]]`` rows (default: one a
        product)."""
        table = {"executor": "ray", "max_runs_per_node": self.runs_per_node, **jobs}
        rows = {"tool": tools} if tools is not None else {}
        return Harness.from_profile({**self.profile, **rows, "jobs": table})


#: What a ``TRICKLE`` task streams, one piece a second (6 s in all).
TRICKLE_WORDS = tuple(f"tick{i} " for i in range(7))


def codex_route(request: RecordedRequest) -> Reply | Stall | Trickle | None:
    task = request.task or ""
    if task.startswith("TRICKLE"):
        return Trickle(TRICKLE_WORDS, interval_s=1.0)
    if task.startswith("HOLD"):
        call = {"cmd": f"echo holding; sleep {task.split()[1]}", "login": False}
        return Reply((FunctionCallItem("exec_command", {**call, "yield_time_ms": 30_000}),))
    if task.startswith("STALL"):
        return Stall((), seconds=60)
    if task.startswith("LOOP"):  # an endless tool loop (test_ray_limits.py's spend caps)
        return Reply((FunctionCallItem("exec_command", {"cmd": "true", "login": False}),))
    if task.startswith("JSON "):  # the rest of the task is the final answer
        return Reply((MessageItem(task.removeprefix("JSON "), phase="final_answer"),))
    if task:
        return Reply((MessageItem(f"codex says: {task}"),))
    return Stall((), seconds=60)  # the turn after a tool call: keep the run mid-tool


def claude_route(request: ClaudeRequest) -> Behaviour | None:
    task = request.task or ""
    if task.startswith("STALL"):
        return Behaviour("stall")
    if task.startswith("TRICKLE"):
        return Behaviour("trickle", text="".join(TRICKLE_WORDS).strip(), seconds=1.0)
    if task.startswith("LOOP"):
        return Behaviour("tool_use", tool_name="Glob", tool_input={"pattern": "*.md"})
    return Behaviour("text", text=f"claude says: {task}")


@pytest.fixture
async def setup(tmp_path: Path, ray_kit: RayKit) -> AsyncIterator[Setup]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    async with (
        FakeResponsesServer(route=codex_route) as codex,
        FakeMessagesServer(route=claude_route) as claude,
    ):
        home = write_codex_home(
            tmp_path / "codex-home", codex.base_url, "mock", env_key=ray_kit.canary_env
        )
        codex_config = {
            "env": hermetic_env(home, api_key=None),
            "credential_env": [ray_kit.canary_env],  # the worker's own environment holds its value
            "permission_mode": "dangerously-bypass-approvals-and-sandbox",
            "stderr": "forward",
            "dispose_grace_ms": 1000,
        }
        claude_config = {
            "env": claude_env(tmp_path / "claude", claude.base_url),
            "stderr": "discard",
            "dispose_grace_ms": 1000,
        }
        profile = {
            "provider": [
                {"kind": "codex", "config": codex_config},
                {"kind": "claude-code", "config": claude_config},
            ]
        }
        caller = Caller(session_id="ray-tests", cwd=str(workspace))
        try:
            yield Setup(codex, claude, workspace, profile, caller, ray_kit.runs_per_node)
        finally:
            claude.release_stalls()
    ray_kit.assert_no_marked()
