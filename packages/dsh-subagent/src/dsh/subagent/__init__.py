"""dsh.subagent: the provider seam for one-shot product subagents.

The value types and protocols a provider implements, the named provider registry
(:class:`SubagentService`) with its lifecycle events, safe diagnostics shared by the product
providers, and entry-point discovery. The conformance kit lives in :mod:`dsh.subagent.testing`.
"""

from importlib import metadata as _metadata

from dsh.subagent._activity import ActivityStamp, ReportsActivity, last_activity
from dsh.subagent._checks import check_one_shot_request
from dsh.subagent._closing import CloseOnce
from dsh.subagent._demo import DEMO_ERROR_BODY, DemoFailure, DemoModel, DemoPlan, DemoScenario
from dsh.subagent._diagnostics import (
    MAX_DIAGNOSTIC_BYTES,
    RESOURCE_LIMIT_CATEGORY,
    FailureFacts,
    bound_diagnostic,
    failure_line,
    with_limits_hit,
)
from dsh.subagent._discovery import (
    PROVIDER_ENTRY_POINT_GROUP,
    InstallRequirements,
    installed_provider_kinds,
    load_provider,
)
from dsh.subagent._doctor import DoctorCheck, credential_checks, payload_check, version_check
from dsh.subagent._env_config import check_env_names, check_env_overlay
from dsh.subagent._events import (
    Listener,
    ProviderAdded,
    ProviderRemoved,
    SubagentEnded,
    SubagentEvent,
    SubagentStarted,
)
from dsh.subagent._latch import ResultLatch
from dsh.subagent._provider_base import ProductInstall, ProviderBase
from dsh.subagent._service import PublishedRun, SubagentService
from dsh.subagent._types import (
    NO_START_CAPABILITIES,
    Capabilities,
    ContentBlock,
    Descriptor,
    Parent,
    ResolvedStartRequest,
    StopReason,
    SubagentProvider,
    SubagentResult,
    SubagentRun,
    SubagentStartRequest,
    TextBlock,
)
from dsh.subagent._usage import RunTimings, UsageFacts
from dsh.subagent.errors import ProductFailure, SubagentError

try:
    __version__ = _metadata.version("dsh-subagent")
except _metadata.PackageNotFoundError:  # imported from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "DEMO_ERROR_BODY",
    "MAX_DIAGNOSTIC_BYTES",
    "NO_START_CAPABILITIES",
    "PROVIDER_ENTRY_POINT_GROUP",
    "RESOURCE_LIMIT_CATEGORY",
    "ActivityStamp",
    "Capabilities",
    "CloseOnce",
    "ContentBlock",
    "DemoFailure",
    "DemoModel",
    "DemoPlan",
    "DemoScenario",
    "Descriptor",
    "DoctorCheck",
    "FailureFacts",
    "InstallRequirements",
    "Listener",
    "Parent",
    "ProductFailure",
    "ProductInstall",
    "ProviderAdded",
    "ProviderBase",
    "ProviderRemoved",
    "PublishedRun",
    "ReportsActivity",
    "ResolvedStartRequest",
    "ResultLatch",
    "RunTimings",
    "StopReason",
    "SubagentEnded",
    "SubagentError",
    "SubagentEvent",
    "SubagentProvider",
    "SubagentResult",
    "SubagentRun",
    "SubagentService",
    "SubagentStartRequest",
    "SubagentStarted",
    "TextBlock",
    "UsageFacts",
    "bound_diagnostic",
    "check_env_names",
    "check_env_overlay",
    "check_one_shot_request",
    "credential_checks",
    "failure_line",
    "installed_provider_kinds",
    "last_activity",
    "load_provider",
    "payload_check",
    "version_check",
    "with_limits_hit",
]
