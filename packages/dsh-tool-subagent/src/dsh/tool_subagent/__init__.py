"""dsh.tool_subagent: the model-visible delegation tool, the ``Tool`` protocol and profiles.

:class:`ToolResult` and :class:`ToolBase` are the same classes as in ``dsh.jobs.tools``, so the
delegation tool and the job tools share one base and return one type. :class:`AgentSession`
calls a harness's tools as one owner (what the framework adapters ``dsh.tool_subagent.pydantic_ai``,
``.openai_agents`` and ``.langchain`` build on). The ``dsh`` command lives in
``dsh.tool_subagent._cli``.

The names are imported on first use (PEP 562), so that ``dsh --version`` and the start-up of
``dsh run`` and ``dsh mcp``, which import modules of this package, do not pay for the whole tool
layer (docs/performance.md, "Start-up").
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

from dsh.tool_subagent._version import __version__ as __version__

if _typing.TYPE_CHECKING:
    from dsh.jobs.tools import ToolBase, ToolResult, to_anthropic_tool, to_openai_tool
    from dsh.tool_subagent._agent_session import AgentSession
    from dsh.tool_subagent._arguments import DelegationArguments
    from dsh.tool_subagent._contract import Caller, Tool
    from dsh.tool_subagent._harness import Harness, ProfileModel, ProviderEntry, default_profile
    from dsh.tool_subagent._tool import SubagentTool, SubagentToolConfig, failure_text

__all__ = [
    "AgentSession",
    "Caller",
    "DelegationArguments",
    "Harness",
    "ProfileModel",
    "ProviderEntry",
    "SubagentTool",
    "SubagentToolConfig",
    "Tool",
    "ToolBase",
    "ToolResult",
    "default_profile",
    "failure_text",
    "to_anthropic_tool",
    "to_openai_tool",
]

# Each public name and the module that defines it (read by tests-e2e/test_public_api.py too).
_LAZY = {
    "AgentSession": "dsh.tool_subagent._agent_session",
    "Caller": "dsh.tool_subagent._contract",
    "DelegationArguments": "dsh.tool_subagent._arguments",
    "Harness": "dsh.tool_subagent._harness",
    "ProfileModel": "dsh.tool_subagent._harness",
    "ProviderEntry": "dsh.tool_subagent._harness",
    "SubagentTool": "dsh.tool_subagent._tool",
    "SubagentToolConfig": "dsh.tool_subagent._tool",
    "Tool": "dsh.tool_subagent._contract",
    "ToolBase": "dsh.jobs.tools",
    "ToolResult": "dsh.jobs.tools",
    "default_profile": "dsh.tool_subagent._harness",
    "failure_text": "dsh.tool_subagent._tool",
    "to_anthropic_tool": "dsh.jobs.tools",
    "to_openai_tool": "dsh.jobs.tools",
}


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
