"""Value types: what to spawn, and what came back."""

from __future__ import annotations

import math
import os
import signal as _signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeAlias

from dsh.subprocess._limits import Limits
from dsh.subprocess.errors import SpawnError

__all__ = [
    "MAX_GRACE_MS",
    "Collect",
    "CollectedText",
    "ProcessOutcome",
    "SpawnSpec",
    "StdinSpec",
    "StreamSpec",
]

MAX_GRACE_MS = 2_147_483_647
"""The largest accepted ``grace_ms``."""

_MAX_NICE = 19
_ARGV_MESSAGE = "invalid argv: expected a non-empty program name at argv[0]"
_GRACE_MESSAGE = f"grace_ms must be a positive finite number no greater than {MAX_GRACE_MS}"


@dataclass(frozen=True, slots=True)
class Collect:
    """Keep the last ``max_bytes`` bytes of a stream in memory."""

    max_bytes: int

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_bytes, bool)
            or not isinstance(self.max_bytes, int)
            or self.max_bytes <= 0
        ):
            raise ValueError("Collect.max_bytes must be a positive integer")


@dataclass(frozen=True, slots=True)
class CollectedText:
    """The bounded tail of a ``Collect`` stream, decoded as UTF-8 (invalid bytes replaced)."""

    text: str
    truncated: bool


@dataclass(frozen=True, slots=True)
class ProcessOutcome:
    """How the direct child ended: an exit code, or the name of the signal that killed it."""

    exit_code: int | None
    signal: str | None

    @classmethod
    def from_returncode(cls, returncode: int) -> ProcessOutcome:
        if returncode >= 0:
            return cls(exit_code=returncode, signal=None)
        try:
            name = _signal.Signals(-returncode).name
        except ValueError:
            name = f"SIG{-returncode}"
        return cls(exit_code=None, signal=name)


StreamSpec: TypeAlias = Literal["pipe", "inherit", "ignore"] | Collect
StdinSpec: TypeAlias = Literal["pipe", "ignore"] | bytes


@dataclass(frozen=True)
class SpawnSpec:
    """What to run. ``argv`` is never shell-interpreted.

    ``env`` is an overlay applied after the scrub (see ``build_child_env``); ``None`` removes a
    name. ``grace_ms`` is the SIGTERM-to-SIGKILL grace, and also bounds pipe draining after exit.
    ``nice`` (0 to 19) lowers the tree's CPU priority: the child's nice value and, on Linux, its
    session's autogroup, set right after ``exec`` (best effort); ``None`` inherits the caller's.
    ``"auto"`` runs the tree at the caller's priority while few trees are busy in this process,
    and lowers every busy one by tiers as more are: 10, then 19 (``ManagedProcess.set_busy``;
    docs/profiles.md). ``busy = False`` spawns an ``"auto"`` tree idle: it neither counts nor
    lowers the busy ones until its owner puts it to work (``set_busy(True)``); for a process
    spawned ahead of its work (a warm process), whose start-up would otherwise lower the runs in
    flight.
    ``limits`` bounds the whole tree through the kernel layer (a cgroup per run); where the
    machine cannot enforce them the spawn fails before anything starts, unless
    ``limits.best_effort``.
    ``owned_dir`` (an absolute path) is a directory that belongs to the tree, a scratch dir say:
    from the call of ``spawn()`` on, dsh removes it with everything in it once the whole tree has
    exited, or when the spawn fails. A supervisor removes it just before it reports the tree
    gone, so the host's process does no filesystem work for it; without a live supervisor
    ``aclose()`` removes it in a worker thread before it returns.
    ``owned_files`` asks the spawn to create ``owned_dir`` (mode 0700; it must not exist yet) and
    write these files into it (plain names to contents, each read-only, mode 0400) just before the
    program starts: in the supervisor where there is one, so the host's process does no filesystem
    work for the dir at all; if anything is at the path already, the spawn fails and leaves it
    alone. ``None`` (the default) means the caller made the dir.
    """

    argv: Sequence[str]
    cwd: str | os.PathLike[str] | None = None
    env: Mapping[str, str | None] = field(default_factory=dict)
    stdin: StdinSpec = "ignore"
    stdout: StreamSpec = "pipe"
    stderr: StreamSpec = "pipe"
    grace_ms: float = 3000.0
    nice: int | Literal["auto"] | None = None
    limits: Limits | None = None
    owned_dir: str | os.PathLike[str] | None = None
    owned_files: Mapping[str, bytes] | None = None
    busy: bool = True

    def __post_init__(self) -> None:
        if self.limits is not None and not isinstance(self.limits, Limits):
            raise ValueError("limits must be a Limits or None")
        nice: object = self.nice
        if (
            nice is not None
            and nice != "auto"
            and (isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= _MAX_NICE)
        ):
            raise ValueError("nice must be an integer from 0 to 19, 'auto', or None")
        object.__setattr__(self, "argv", _check_argv(self.argv))
        object.__setattr__(self, "grace_ms", _check_grace(self.grace_ms))
        object.__setattr__(self, "env", _check_env(self.env))
        stdin: object = self.stdin
        if isinstance(stdin, bytearray | memoryview):
            object.__setattr__(self, "stdin", bytes(stdin))
        elif not (isinstance(stdin, bytes) or stdin in ("pipe", "ignore")):
            raise ValueError("stdin must be 'pipe', 'ignore' or bytes")
        for name in ("stdout", "stderr"):
            value: object = getattr(self, name)
            if not (isinstance(value, Collect) or value in ("pipe", "inherit", "ignore")):
                raise ValueError(
                    f"{name} must be 'pipe', 'inherit', 'ignore' or Collect(max_bytes)"
                )
        cwd: object = self.cwd
        if cwd is not None and not isinstance(cwd, str | os.PathLike):
            raise ValueError("cwd must be a path or None")
        owned: object = self.owned_dir
        if owned is not None:
            path = os.fspath(owned) if isinstance(owned, str | os.PathLike) else None
            if not isinstance(path, str) or not Path(path).is_absolute():
                raise ValueError("owned_dir must be an absolute path or None")
            object.__setattr__(self, "owned_dir", path)
        if self.owned_files is not None:
            if owned is None:
                raise ValueError("owned_files needs owned_dir")
            object.__setattr__(self, "owned_files", _check_owned_files(self.owned_files))


def _check_argv(argv: object) -> tuple[str, ...]:
    if isinstance(argv, str | bytes) or not isinstance(argv, Sequence):
        if isinstance(argv, str | bytes) and not argv.strip():
            raise SpawnError(_ARGV_MESSAGE)
        raise SpawnError("invalid argv: expected a sequence of strings, not a single value")
    items = tuple(argv)
    if not items or not isinstance(items[0], str) or not items[0].strip():
        raise SpawnError(_ARGV_MESSAGE)
    for item in items:
        if not isinstance(item, str):
            raise SpawnError("invalid argv: every item must be a string")
        if "\0" in item:
            raise SpawnError("invalid argv: items must not contain NUL")
    return items


def _check_owned_files(files: object) -> dict[str, bytes]:
    if not isinstance(files, Mapping):
        raise ValueError("owned_files must be a mapping of file names to bytes, or None")
    checked: dict[str, bytes] = {}
    for name, content in files.items():
        if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\0" in name:
            raise ValueError("owned_files names must be plain file names (no '/', '.' or '..')")
        if not isinstance(content, bytes):
            raise ValueError(f"owned_files content for {name!r} must be bytes")
        checked[name] = content
    return checked


def _check_grace(grace_ms: object) -> float:
    if isinstance(grace_ms, bool) or not isinstance(grace_ms, int | float):
        raise ValueError(_GRACE_MESSAGE)
    value = float(grace_ms)
    if not math.isfinite(value) or not 0 < value <= MAX_GRACE_MS:
        raise ValueError(_GRACE_MESSAGE)
    return value


def _check_env(env: object) -> Mapping[str, str | None]:
    if not isinstance(env, Mapping):
        raise ValueError("env must be a mapping of names to strings or None")
    checked: dict[str, str | None] = {}
    for name, value in env.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise ValueError("env names must be non-empty strings without '=' or NUL")
        if value is not None and not isinstance(value, str):
            raise ValueError(f"env value for {name!r} must be a string or None")
        if value is not None and "\0" in value:
            raise ValueError(f"env value for {name!r} must not contain NUL")
        checked[name] = value
    return checked
