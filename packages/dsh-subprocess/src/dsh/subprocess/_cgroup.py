"""The kernel layer: a cgroup per run, owned by the host, under the other containment layers.

A run's product is placed in its own cgroup v2 group before it execs (its supervisor joins the
group, starts the program, and leaves), so everything the product ever starts is in the group,
whatever it does to its lineage, session or environment, and even after a tool killed the
supervisor and the spawner: cgroup membership can only be changed by writing ``cgroup.procs``,
which a same-uid tool could do only with write access to the group's parent (root, see the docs).
Teardown writes ``cgroup.kill`` (one write, the kernel kills every member) and waits for the
group to be unpopulated; then the directories are removed.

Limits (``Limits``) use the v2 controllers where the group's parent offers them (pure cgroup v2
with delegation), else v1 ``memory``, ``pids`` and ``cpu`` hierarchies (hybrid machines), each a
group created below the host's own group in that hierarchy, which the supervisor joins too.

Directories: ``<host's group>/dsh-<owner pid>-<owner create time>/<run id>``. The per-host
directory stays while the host lives; ``sweep_dead_owners()`` removes those of dead hosts
(killing what is left in them), as ``reap_orphans()`` does for processes.

``DSH_KERNEL_LAYER=off`` forces the layer off (the fallback layers alone), for tests and
benchmarks, and for a machine where creating groups is unwanted.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from dsh.subprocess._limits import Limits
from dsh.subprocess._procfs import _IS_LINUX, owner_create_time

__all__ = [
    "KERNEL_LAYER_ENV",
    "KernelLayer",
    "RunGroup",
    "kernel_layer",
    "limits_problem",
    "sweep_dead_owners",
]

_log = logging.getLogger("dsh.subprocess")

KERNEL_LAYER_ENV = "DSH_KERNEL_LAYER"
"""Set to ``off`` to force the kernel layer off in this process."""

_PREFIX = "dsh-"
_V1_CONTROLLERS = {"memory": "memory", "tasks": "pids", "cpu": "cpu"}
_CPU_PERIOD_US = 100_000
_EMPTY_WAIT_S = 2.0
_OWNER_TIME_TOLERANCE_S = 1.0


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, filesystem type, super options) of every cgroup mount."""
    found = []
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        head, _, tail = line.partition(" - ")
        parts, rest = head.split(), tail.split()
        if len(parts) >= 5 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
            found.append((parts[4].replace("\\040", " "), rest[0], set(rest[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """This process's group per hierarchy: ``""`` for v2, else each v1 controller's name."""
    paths: dict[str, str] = {}
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return paths
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


@dataclass
class KernelLayer:
    """What this machine allows, found once per process (``kernel_layer()``)."""

    owner: str = ""
    v2_owner_dir: Path | None = None
    """The host's own directory in the v2 hierarchy: the runs' groups go below it."""
    v2_controllers: frozenset[str] = frozenset()
    """v2 controllers enabled for the runs' groups (``memory``, ``pids``, ``cpu``)."""
    v1_owner_dirs: dict[str, Path] = field(default_factory=dict)
    """Limit key -> the host's own directory in the v1 hierarchy of that controller."""
    reason: str = ""
    """Why the layer is off, or what limits it cannot enforce (for ``dsh doctor``)."""

    @property
    def active(self) -> bool:
        return self.v2_owner_dir is not None

    def describe(self) -> tuple[str, str]:
        """(the kernel layer's state, the limits it can enforce), one line each, for doctor."""
        if not self.active:
            return f"off: {self.reason}", "none (no kernel layer)"
        state = "on: a cgroup v2 group per run, torn down by cgroup.kill"
        by = [
            f"{key} (cgroup {'v2' if _V1_CONTROLLERS[key] in self.v2_controllers else 'v1'})"
            for key in sorted(self.limit_keys())
        ]
        limits = ", ".join(by) if by else "none"
        if self.reason:
            limits = f"{limits}; {self.reason}"
        return state, limits

    def limit_keys(self) -> frozenset[str]:
        """The limit keys this machine can enforce."""
        if not self.active:
            return frozenset()
        by_v2 = {key for key, name in _V1_CONTROLLERS.items() if name in self.v2_controllers}
        return frozenset(by_v2 | set(self.v1_owner_dirs))

    def missing(self, limits: Limits | None) -> tuple[str, ...]:
        """The requested limit keys this machine cannot enforce."""
        if limits is None:
            return ()
        can = self.limit_keys()
        return tuple(key for key in limits.requested if key not in can)

    def new_group(self, run_id: str, limits: Limits | None) -> RunGroup | None:
        """Create a run's groups (None when the layer is off or creating fails)."""
        if self.v2_owner_dir is None:
            return None
        group = RunGroup(self.v2_owner_dir / run_id)
        try:
            self.v2_owner_dir.mkdir(exist_ok=True)  # removed behind our back: made again
            group.v2.mkdir()
            group.created.append(group.v2)
            self.add_limits(group, limits)
        except OSError:
            _log.debug("creating the run's cgroup failed", exc_info=True)
            group.remove()
            return None
        return group

    def planned_group(self, run_id: str) -> RunGroup | None:
        """A standby's group, not made yet: the standby supervisor makes it (``make_dirs()``)
        before it joins, so the host spends no CPU on it (None when the layer is off)."""
        if self.v2_owner_dir is None:
            return None
        group = RunGroup(self.v2_owner_dir / run_id)
        group.created.append(group.v2)
        return group

    def add_limits(self, group: RunGroup, limits: Limits | None) -> None:
        """Apply ``limits`` to ``group`` (v1 limit groups are created, to be joined too)."""
        if limits is not None:
            for key in limits.requested:
                self._apply(group, key, limits, group.v2.name)

    def _apply(self, group: RunGroup, key: str, limits: Limits, run_id: str) -> None:
        controller = _V1_CONTROLLERS[key]
        if controller in self.v2_controllers:
            target = group.v2
            files = {
                "memory": [("memory.max", str(limits.memory)), ("memory.swap.max", "0")],
                "tasks": [("pids.max", str(limits.tasks))],
                "cpu": [("cpu.max", f"{_cpu_quota(limits)} {_CPU_PERIOD_US}")],
            }[key]
        elif key in self.v1_owner_dirs:
            target = self.v1_owner_dirs[key] / run_id
            if target not in group.created:
                target.parent.mkdir(exist_ok=True)
                target.mkdir()
                group.created.append(target)
                group.join.append(target / "cgroup.procs")
            files = {
                "memory": [("memory.limit_in_bytes", str(limits.memory))],
                "tasks": [("pids.max", str(limits.tasks))],
                "cpu": [
                    ("cpu.cfs_period_us", str(_CPU_PERIOD_US)),
                    ("cpu.cfs_quota_us", str(_cpu_quota(limits))),
                ],
            }[key]
            if key == "memory":
                group.v1_memory = target
            elif key == "tasks":
                group.v1_pids = target
        else:
            return  # not enforceable here: the caller checked ``missing()`` already
        for name, value in files:
            path = target / name
            if name == "memory.swap.max" and not path.exists():
                continue
            path.write_text(value)


def _cpu_quota(limits: Limits) -> int:
    return max(1000, int((limits.cpu or 1.0) * _CPU_PERIOD_US))


@dataclass
class RunGroup:
    """One run's groups: the v2 group (membership, kill) and any v1 limit groups."""

    v2: Path
    created: list[Path] = field(default_factory=list)
    join: list[Path] = field(default_factory=list)
    """The ``cgroup.procs`` files the supervisor writes its pid to before it starts the program."""
    v1_memory: Path | None = None
    v1_pids: Path | None = None
    killed: bool = False

    def __post_init__(self) -> None:
        self.join.insert(0, self.v2 / "cgroup.procs")

    def pairs(self, *, v1_only: bool = False) -> list[tuple[bytes, bytes]]:
        """(join, home) ``cgroup.procs`` paths for the supervisor: home is the host's group
        (``<hierarchy's group>/dsh-<owner>/<run>/cgroup.procs``, two levels up)."""
        joins = self.join[1:] if v1_only else self.join
        return [(os.fsencode(p), os.fsencode(p.parents[2] / "cgroup.procs")) for p in joins]

    def make_dirs(self) -> list[bytes]:
        """For a standby of a ``planned_group``: its owner dir (made again if it was removed
        behind the host's back), then the group itself."""
        return [os.fsencode(self.v2.parent), os.fsencode(self.v2)]

    def populated(self) -> bool:
        """True while any process is in the group (or when that cannot be read)."""
        try:
            for line in (self.v2 / "cgroup.events").read_text().splitlines():
                if line.startswith("populated "):
                    return line.split()[1] != "0"
        except OSError:
            return not self.removed()
        return True

    def removed(self) -> bool:
        return not self.v2.exists()

    def kill(self) -> None:
        """SIGKILL every member, in one write (the kernel walks the group)."""
        self.killed = True
        try:
            (self.v2 / "cgroup.kill").write_text("1")
        except OSError:
            _log.debug("cgroup.kill failed", exc_info=True)

    def hit(self) -> tuple[str, ...]:
        """The limits the tree ran into: ``memory`` (an OOM kill in the group), ``tasks``."""
        found = []
        v1_memory = self.v1_memory
        if _counter(self.v2 / "memory.events", "oom_kill") or (
            v1_memory is not None and _counter(v1_memory / "memory.oom_control", "oom_kill")
        ):
            found.append("memory")
        if _counter(self.v2 / "pids.events", "max") or (
            self.v1_pids is not None and _counter(self.v1_pids / "pids.events", "max")
        ):
            found.append("tasks")
        return tuple(found)

    def remove(self) -> bool:
        """Remove the directories (children first); True when all are gone."""
        ok = True
        for path in reversed(self.created):
            try:
                _remove_tree(path)
            except FileNotFoundError:
                pass
            except OSError:
                ok = False
                _log.debug("removing a run's cgroup failed", exc_info=True)
        return ok


def _remove_tree(group: Path) -> None:
    """``rmdir`` a group and the groups below it, deepest first (a host that runs inside a run's
    group, a nested dsh, makes its own groups there; its files go with each ``rmdir``)."""
    for parent, children, _ in os.walk(group, topdown=False):
        for child in children:
            with contextlib.suppress(FileNotFoundError):
                (Path(parent) / child).rmdir()
    group.rmdir()


def _counter(path: Path, name: str) -> int:
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == name:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


_lock = threading.Lock()
_layer: tuple[int, KernelLayer] | None = None


def kernel_layer() -> KernelLayer:
    """The kernel layer of this process (found on first use; a fork finds its own).

    ``DSH_KERNEL_LAYER=off`` is read on every call, so it takes effect for later spawns.
    """
    global _layer
    if _forced_off():
        return KernelLayer(reason=f"forced off by {KERNEL_LAYER_ENV}=off")
    with _lock:
        if _layer is None or _layer[0] != os.getpid():
            _layer = (os.getpid(), _detect())
        return _layer[1]


def limits_problem(limits: Limits | None) -> str | None:
    """Why ``limits`` cannot be run as asked here (naming the field), or None when they can.

    Best-effort limits are never a problem: what cannot be enforced is left out.
    """
    if limits is None or limits.best_effort:
        return None
    layer = kernel_layer()
    missing = layer.missing(limits)
    if not missing:
        return None
    return f"limits.{missing[0]} cannot be enforced on this machine ({layer.reason})"


def _forced_off() -> bool:
    return os.environ.get(KERNEL_LAYER_ENV, "").strip().lower() in ("off", "0", "false", "no")


def _owner_name() -> str:
    pid = os.getpid()
    created = owner_create_time(pid) or 0.0
    return f"{_PREFIX}{pid}-{created:.3f}"


def _detect() -> KernelLayer:
    if not _IS_LINUX:
        return KernelLayer(reason="not Linux: no cgroups")
    mounts = _mounts()
    own = _own_paths()
    v2 = [point for point, kind, _ in mounts if kind == "cgroup2"]
    if not v2 or "" not in own:
        return KernelLayer(reason="no cgroup v2 hierarchy is mounted")
    name = _owner_name()
    base = Path(v2[0] + own[""].rstrip("/"))
    owner_dir = base / name
    try:
        owner_dir.mkdir(exist_ok=True)
    except OSError as exc:
        return KernelLayer(
            reason=f"the cgroup v2 group of this process is not writable ({type(exc).__name__}): "
            "needs root, a systemd delegation (Delegate=yes) or a container's own cgroup"
        )
    if not (owner_dir / "cgroup.kill").exists():
        with contextlib.suppress(OSError):
            owner_dir.rmdir()
        return KernelLayer(reason="this kernel has no cgroup.kill (needs Linux 5.14 or later)")
    layer = KernelLayer(owner=name, v2_owner_dir=owner_dir)
    layer.v2_controllers = _enable_v2_controllers(base, owner_dir)
    for key, controller in _V1_CONTROLLERS.items():
        if controller in layer.v2_controllers or controller not in own:
            continue
        for point, kind, options in mounts:
            if kind == "cgroup" and controller in options:
                directory = Path(point + own[controller].rstrip("/")) / name
                try:
                    directory.mkdir(exist_ok=True)
                except OSError:
                    continue
                layer.v1_owner_dirs[key] = directory
                break
    missing = [key for key in _V1_CONTROLLERS if key not in layer.limit_keys()]
    if missing:
        layer.reason = "no controller for limits." + ", limits.".join(missing)
    atexit.register(_remove_owner_dirs, layer, os.getpid())
    return layer


def _remove_owner_dirs(layer: KernelLayer, pid: int) -> None:
    """At exit: the host's own directories (empty once its runs are gone; else the sweep's)."""
    if os.getpid() != pid:
        return  # a fork of the host: not its directories
    for directory in [layer.v2_owner_dir, *layer.v1_owner_dirs.values()]:
        if directory is not None:
            with contextlib.suppress(OSError):
                for run in directory.iterdir():
                    if run.is_dir():  # a standby's group, empty once its supervisor left
                        with contextlib.suppress(OSError):
                            run.rmdir()
            with contextlib.suppress(OSError):
                directory.rmdir()


def _enable_v2_controllers(base: Path, owner_dir: Path) -> frozenset[str]:
    """Enable memory, pids and cpu for the runs' groups where the hierarchy delegates them."""
    try:
        available = set((base / "cgroup.controllers").read_text().split())
    except OSError:
        return frozenset()
    wanted = [name for name in ("memory", "pids", "cpu") if name in available]
    enabled = set()
    for name in wanted:
        try:
            # A group with processes of its own cannot enable controllers for its children
            # (cgroup v2's no-internal-process rule); the host's group usually has the host.
            with contextlib.suppress(OSError):
                (base / "cgroup.subtree_control").write_text(f"+{name}")
            (owner_dir / "cgroup.subtree_control").write_text(f"+{name}")
            enabled.add(name)
        except OSError:
            continue
    return frozenset(enabled)


def sweep_dead_owners() -> list[str]:
    """Kill what is left in the groups of dead hosts and remove their directories.

    Returns the names of the host directories removed. Blocks briefly (at most about two
    seconds per stuck group). Does nothing when the layer is off.
    """
    layer = kernel_layer()
    if layer.v2_owner_dir is None:
        return []
    swept = []
    bases = [layer.v2_owner_dir.parent, *(path.parent for path in layer.v1_owner_dirs.values())]
    for base in bases:
        try:
            names = [entry.name for entry in base.iterdir() if entry.name.startswith(_PREFIX)]
        except OSError:
            continue
        for name in names:
            if name != layer.owner and not _owner_alive(name):
                _sweep(base / name)
                if not (base / name).exists():
                    swept.append(name)
    return sorted(set(swept))


def _owner_alive(name: str) -> bool:
    try:
        pid_text, created_text = name[len(_PREFIX) :].split("-", 1)
        pid, created = int(pid_text), float(created_text)
    except ValueError:
        return True  # not ours to judge
    now = owner_create_time(pid)
    return now is not None and abs(now - created) <= _OWNER_TIME_TOLERANCE_S


def _sweep(owner_dir: Path) -> None:
    with contextlib.suppress(OSError):
        for run in [entry for entry in owner_dir.iterdir() if entry.is_dir()]:
            _empty(run)
            with contextlib.suppress(OSError):
                _remove_tree(run)
    with contextlib.suppress(OSError):
        owner_dir.rmdir()


def _empty(group: Path) -> None:
    """Kill every process in ``group`` (cgroup.kill in v2, SIGKILL rounds in v1), bounded."""
    deadline = time.monotonic() + _EMPTY_WAIT_S
    kill_file = group / "cgroup.kill"
    while time.monotonic() < deadline:
        try:
            pids = [int(pid) for pid in (group / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return
        if not pids:
            return
        if kill_file.exists():
            with contextlib.suppress(OSError):
                kill_file.write_text("1")
        else:
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, 9)
        time.sleep(0.01)
