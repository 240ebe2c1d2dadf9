"""dsh.subprocess: credential-scrubbed spawning and whole-tree termination.

Spawn through a ``SubprocessRuntime`` (``default_runtime()`` is the process-wide one); every
``ManagedProcess`` is closed with ``await proc.aclose()``, which proves its whole tree gone.
"""

from importlib import metadata as _metadata

from dsh.subprocess._env import (
    DSH_ENV_PREFIX,
    SENSITIVE_ENV_PATTERN,
    build_child_env,
    scrubbed_parent_env,
)
from dsh.subprocess._orphans import marked_processes, reap_orphans, reap_orphans_once
from dsh.subprocess._process import ManagedProcess
from dsh.subprocess._procfs import TREE_MARKER_ENV
from dsh.subprocess._runtime import SubprocessRuntime, default_runtime
from dsh.subprocess._spec import (
    MAX_GRACE_MS,
    Collect,
    CollectedText,
    ProcessOutcome,
    SpawnSpec,
    StdinSpec,
    StreamSpec,
)
from dsh.subprocess.errors import SpawnError, SubprocessError, TeardownError

try:
    __version__ = _metadata.version("dsh-subprocess")
except _metadata.PackageNotFoundError:  # imported from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "DSH_ENV_PREFIX",
    "MAX_GRACE_MS",
    "SENSITIVE_ENV_PATTERN",
    "TREE_MARKER_ENV",
    "Collect",
    "CollectedText",
    "ManagedProcess",
    "ProcessOutcome",
    "SpawnError",
    "SpawnSpec",
    "StdinSpec",
    "StreamSpec",
    "SubprocessError",
    "SubprocessRuntime",
    "TeardownError",
    "build_child_env",
    "default_runtime",
    "marked_processes",
    "reap_orphans",
    "reap_orphans_once",
    "scrubbed_parent_env",
]
