"""dsh.tool_subagent: the model-visible delegation tool, the ``Tool`` protocol and profiles.

:class:`ToolResult` and :class:`ToolBase` are the same classes as in ``dsh.jobs.tools``, so the
delegation tool and the job tools share one base and return one type. :class:`AgentSession`
calls a harness's tools as one owner (what the framework adapters ``dsh.tool_subagent.pydantic_ai``,
``.openai_agents`` and ``.langchain`` build on). The ``dsh`` command lives in
``dsh.tool_subagent._cli``.
"""

from dsh.jobs.tools import ToolBase, ToolResult, to_anthropic_tool, to_openai_tool
from dsh.tool_subagent._agent_session import AgentSession
from dsh.tool_subagent._arguments import DelegationArguments
from dsh.tool_subagent._contract import Caller, Tool
from dsh.tool_subagent._harness import Harness, ProfileModel, ProviderEntry, default_profile
from dsh.tool_subagent._tool import SubagentTool, SubagentToolConfig, failure_text
from dsh.tool_subagent._version import __version__ as __version__

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
