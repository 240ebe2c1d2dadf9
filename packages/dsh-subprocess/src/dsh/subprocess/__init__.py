"""dsh.subprocess: credential-scrubbed spawning and whole-tree termination.

Spawn through a ``SubprocessRuntime`` (``default_runtime()`` is the process-wide one); every
``ManagedProcess`` is closed with ``await proc.aclose()``, which proves its whole tree gone.
"""

from dsh.subprocess._cgroup import KERNEL_LAYER_ENV, KernelLayer, kernel_layer, limits_problem
from dsh.subprocess._detached import DetachedProcess, spawn_detached
from dsh.subprocess._env import (
    AGENT_SOCKET_NAMES,
    CORE_ENV_NAMES,
    CREDENTIAL_VALUE_PATTERN,
    DSH_ENV_PREFIX,
    ENV_POLICIES,
    SCRUB_EXEMPT_NAMES,
    SENSITIVE_ENV_PATTERN,
    EnvForwarding,
    EnvPolicy,
    ForwardingConfig,
    build_child_env,
    is_credential_env,
    policy_overlay,
    scrubbed_parent_env,
)
from dsh.subprocess._limits import LIMIT_KEYS, Limits
from dsh.subprocess._lines import READ_CHUNK_BYTES, BoundedLines, DroppingReader
from dsh.subprocess._orphans import marked_processes, reap_orphans, reap_orphans_once
from dsh.subprocess._process import ManagedProcess
from dsh.subprocess._procfs import TREE_MARKER_ENV
from dsh.subprocess._runtime import SubprocessRuntime, default_runtime
from dsh.subprocess._spawn_checks import SpawnChecks
from dsh.subprocess._spec import (
    MAX_GRACE_MS,
    Collect,
    CollectedText,
    ProcessOutcome,
    SpawnSpec,
    StdinSpec,
    StreamSpec,
)
from dsh.subprocess._trace_context import (
    TRACE_CONTEXT_ENV,
    current_trace_context,
    spawn_trace_context,
)
from dsh.subprocess.errors import LineTooLong, SpawnError, SubprocessError, TeardownError
from dsh.subprocess.lazy import package_getattr as _package_getattr

# __version__ is read when asked for (dsh.subprocess.lazy).
__getattr__ = _package_getattr(__name__, distribution="dsh-subprocess")

__all__ = [
    "AGENT_SOCKET_NAMES",
    "CORE_ENV_NAMES",
    "CREDENTIAL_VALUE_PATTERN",
    "DSH_ENV_PREFIX",
    "ENV_POLICIES",
    "KERNEL_LAYER_ENV",
    "LIMIT_KEYS",
    "MAX_GRACE_MS",
    "READ_CHUNK_BYTES",
    "SCRUB_EXEMPT_NAMES",
    "SENSITIVE_ENV_PATTERN",
    "TRACE_CONTEXT_ENV",
    "TREE_MARKER_ENV",
    "BoundedLines",
    "Collect",
    "CollectedText",
    "DetachedProcess",
    "DroppingReader",
    "EnvForwarding",
    "EnvPolicy",
    "ForwardingConfig",
    "KernelLayer",
    "Limits",
    "LineTooLong",
    "ManagedProcess",
    "ProcessOutcome",
    "SpawnChecks",
    "SpawnError",
    "SpawnSpec",
    "StdinSpec",
    "StreamSpec",
    "SubprocessError",
    "SubprocessRuntime",
    "TeardownError",
    "build_child_env",
    "current_trace_context",
    "default_runtime",
    "is_credential_env",
    "kernel_layer",
    "limits_problem",
    "marked_processes",
    "policy_overlay",
    "reap_orphans",
    "reap_orphans_once",
    "scrubbed_parent_env",
    "spawn_detached",
    "spawn_trace_context",
]
