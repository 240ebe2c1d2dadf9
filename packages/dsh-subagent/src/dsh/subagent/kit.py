"""dsh.subagent.kit: what a product provider's author builds on.

:mod:`dsh.subagent` is the seam a harness uses (requests, results, runs, the registry, its events
and discovery). This submodule gathers what only a provider implements with: the request checks
every product provider applies before spawning, the safe-diagnostic helpers, the result latch,
the close-once helper, the ``doctor()`` row builders, the env checks, the config base with the
fields both product providers share, ``ProviderBase`` (with ``ProductInstall``): the
``from_config``, ``name`` and ``doctor()`` both product providers share, the pool of warm
processes (``WarmPool``, for ``prewarm``), the activity stamp (``ActivityStamp``: a run
``touch()``-es it on every message it reads from its product and exposes it as the
``last_activity`` property, which the caller's stall limit reads; ``ReportsActivity`` and
``last_activity(run)`` are the reading side; a run may also expose ``first_activity``, its
first model output, for the host's timings), owner-named run dirs (their sweep, the
private-home template copy), and the provider template: ``ProductProvider`` (the start
algorithm, the rollback and the warm pool, written once, on the product's hooks), ``ProductRun``
(the run base with the close contract) and ``LoopbackDemo`` (``dsh demo`` on a loopback
model server). Provider authors import these names from here;
the ones :mod:`dsh.subagent` once re-exported still import from the root with a
``DeprecationWarning`` until dsh-subagent 1.0 (deprecated since 0.2.0) (tests/test_surfaces.py).
"""

from dsh.subagent._activity import ActivityStamp, ReportsActivity, first_activity, last_activity
from dsh.subagent._checks import check_one_shot_request
from dsh.subagent._closing import CloseOnce
from dsh.subagent._config_base import (
    ISOLATION_MODES,
    MAX_GRACE_MS,
    MAX_PREWARM,
    EnvPolicy,
    Isolation,
    ProviderConfigBase,
    RunLimits,
)
from dsh.subagent._diagnostics import (
    MAX_DIAGNOSTIC_BYTES,
    FailureFacts,
    bound_diagnostic,
    failure_line,
)
from dsh.subagent._doctor import DoctorCheck, credential_checks, payload_check, version_check
from dsh.subagent._env_config import check_env_names, check_env_overlay
from dsh.subagent._installed import installed_version
from dsh.subagent._latch import ResultLatch
from dsh.subagent._loopback_demo import LoopbackDemo, LoopbackServer
from dsh.subagent._output_schema import compact_json
from dsh.subagent._owned_dirs import (
    copy_home_template,
    make_off_loop,
    make_owned_dir,
    new_owned_dir_path,
    owned_dir_prefix,
    remove_off_loop,
    sweep_lost_dirs,
    sweep_lost_dirs_once,
)
from dsh.subagent._product_provider import EnvNames, Launch, ProductProvider, spawning_warm
from dsh.subagent._product_run import ProcessHandle, ProductRun
from dsh.subagent._provider_base import ProductInstall, ProviderBase, product_config_dir
from dsh.subagent._usage import (
    RunTimings,
    UsageFacts,
    UsageWatch,
    non_negative_int,
    watch_usage,
)
from dsh.subagent._warm import WARM_START_TIMEOUT_S, WarmPool
from dsh.subagent.errors import ProductFailure

__all__ = [
    "ISOLATION_MODES",
    "MAX_DIAGNOSTIC_BYTES",
    "MAX_GRACE_MS",
    "MAX_PREWARM",
    "WARM_START_TIMEOUT_S",
    "ActivityStamp",
    "CloseOnce",
    "DoctorCheck",
    "EnvNames",
    "EnvPolicy",
    "FailureFacts",
    "Isolation",
    "Launch",
    "LoopbackDemo",
    "LoopbackServer",
    "ProcessHandle",
    "ProductFailure",
    "ProductInstall",
    "ProductProvider",
    "ProductRun",
    "ProviderBase",
    "ProviderConfigBase",
    "ReportsActivity",
    "ResultLatch",
    "RunLimits",
    "RunTimings",
    "UsageFacts",
    "UsageWatch",
    "WarmPool",
    "bound_diagnostic",
    "check_env_names",
    "check_env_overlay",
    "check_one_shot_request",
    "compact_json",
    "copy_home_template",
    "credential_checks",
    "failure_line",
    "first_activity",
    "installed_version",
    "last_activity",
    "make_off_loop",
    "make_owned_dir",
    "new_owned_dir_path",
    "non_negative_int",
    "owned_dir_prefix",
    "payload_check",
    "product_config_dir",
    "remove_off_loop",
    "spawning_warm",
    "sweep_lost_dirs",
    "sweep_lost_dirs_once",
    "version_check",
    "watch_usage",
]
