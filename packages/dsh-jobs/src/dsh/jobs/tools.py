"""The job control tools ``job_output``, ``job_list`` and ``job_kill``, and the tool helpers.

Every tool here is a :class:`ToolBase`, the one base class of every dsh tool (the delegation tool
too), and satisfies ``dsh.tool_subagent.Tool`` structurally. :class:`ToolResult` is the one
result class of the whole stack; ``dsh.tool_subagent`` re-exports both.
"""

from dsh.jobs._tool_base import (
    SchemaTool,
    ToolBase,
    ToolResult,
    to_anthropic_tool,
    to_openai_tool,
    validate_arguments,
)
from dsh.jobs._tools import (
    JOB_LIST_FINISHED_LINES,
    JOB_TOOL_NAMES,
    JOB_TOOLS_GUIDE,
    JobKillTool,
    JobListTool,
    JobOutputTool,
    job_tools,
)

__all__ = [
    "JOB_LIST_FINISHED_LINES",
    "JOB_TOOLS_GUIDE",
    "JOB_TOOL_NAMES",
    "JobKillTool",
    "JobListTool",
    "JobOutputTool",
    "SchemaTool",
    "ToolBase",
    "ToolResult",
    "job_tools",
    "to_anthropic_tool",
    "to_openai_tool",
    "validate_arguments",
]
