"""dsh.tool_subagent: the model-visible delegation tool, the ``Tool`` protocol and profiles.

:class:`ToolResult` is the same class as ``dsh.jobs.tools.ToolResult``, so the delegation tool
and the job tools return one type. The ``dsh`` command lives in ``dsh.tool_subagent._cli``.
"""

from dsh.jobs.tools import ToolResult, to_anthropic_tool, to_openai_tool
from dsh.tool_subagent._harness import Harness, ProfileModel, ProviderEntry, default_profile
from dsh.tool_subagent._tool import (
    Caller,
    SubagentTool,
    SubagentToolConfig,
    Tool,
    failure_text,
)

__all__ = [
    "Caller",
    "Harness",
    "ProfileModel",
    "ProviderEntry",
    "SubagentTool",
    "SubagentToolConfig",
    "Tool",
    "ToolResult",
    "default_profile",
    "failure_text",
    "to_anthropic_tool",
    "to_openai_tool",
]
