"""dsh.subagent: the provider seam for one-shot product subagents.

The value types and protocols a provider implements, the named provider registry
(:class:`SubagentService`) with its lifecycle events, and entry-point discovery: the harness's
surface. Provider authors import their building blocks from :mod:`dsh.subagent.kit`; the
conformance kit lives in :mod:`dsh.subagent.testing`.
"""

from dsh.subagent._demo import DEMO_ERROR_BODY, DemoFailure, DemoModel, DemoPlan, DemoScenario
from dsh.subagent._diagnostics import RESOURCE_LIMIT_CATEGORY, with_limits_hit
from dsh.subagent._discovery import (
    PROVIDER_ENTRY_POINT_GROUP,
    InstallRequirements,
    installed_provider_kinds,
    load_provider,
)
from dsh.subagent._events import (
    Listener,
    ProviderAdded,
    ProviderRemoved,
    SubagentEnded,
    SubagentEvent,
    SubagentStarted,
)
from dsh.subagent._output_schema import (
    MAX_OUTPUT_SCHEMA_BYTES,
    STRUCTURED_OUTPUT_CATEGORY,
    check_output_schema,
)
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

# Provider-author names that once lived here too; they import from dsh.subagent.kit now.
# Deprecated since dsh-subagent 0.2.0; kept importable (with a warning) until 1.0 so existing
# providers keep working.
_MOVED_TO_KIT = frozenset(
    {
        "ActivityStamp",
        "CloseOnce",
        "DoctorCheck",
        "FailureFacts",
        "MAX_DIAGNOSTIC_BYTES",
        "ProductInstall",
        "ProviderBase",
        "ReportsActivity",
        "ResultLatch",
        "bound_diagnostic",
        "check_env_names",
        "check_env_overlay",
        "check_one_shot_request",
        "credential_checks",
        "failure_line",
        "last_activity",
        "payload_check",
        "version_check",
    }
)


def __getattr__(name: str) -> object:
    if name in _MOVED_TO_KIT:
        import warnings

        from dsh.subagent import kit

        warnings.warn(
            f"dsh.subagent.{name} moved: use 'from dsh.subagent.kit import {name}'",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(kit, name)
    if name == "__version__":  # read when asked for: importlib.metadata is dear at start-up
        from importlib import metadata

        try:
            return metadata.version("dsh-subagent")
        except metadata.PackageNotFoundError:  # a source tree that is not installed
            return "0+unknown"
    raise AttributeError(f"module 'dsh.subagent' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*__all__, "__version__"})


__all__ = [
    "DEMO_ERROR_BODY",
    "MAX_OUTPUT_SCHEMA_BYTES",
    "NO_START_CAPABILITIES",
    "PROVIDER_ENTRY_POINT_GROUP",
    "RESOURCE_LIMIT_CATEGORY",
    "STRUCTURED_OUTPUT_CATEGORY",
    "Capabilities",
    "ContentBlock",
    "DemoFailure",
    "DemoModel",
    "DemoPlan",
    "DemoScenario",
    "Descriptor",
    "InstallRequirements",
    "Listener",
    "Parent",
    "ProductFailure",
    "ProviderAdded",
    "ProviderRemoved",
    "PublishedRun",
    "ResolvedStartRequest",
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
    "check_output_schema",
    "installed_provider_kinds",
    "load_provider",
    "with_limits_hit",
]
