"""dsh's tools as OpenAI Agents SDK tools (extra ``dsh-tool-subagent[openai-agents]``).

``function_tools(session)`` gives an ``agents.Agent`` every tool of a profile with the names,
schemas and texts ``dsh mcp`` serves, called as one :class:`AgentSession`; see
``docs/frameworks.md``. Without the SDK installed, importing this module raises an
``ImportError`` that names the extra.
"""

from dsh.tool_subagent._agent_session import AgentSession
from dsh.tool_subagent._extras import framework_missing, missing_extra_text

try:
    from dsh.tool_subagent._openai_agents import INVALID_JSON_TEXT, function_tools
except ImportError as _exc:
    if framework_missing(_exc, ("agents", "openai")):
        _text = missing_extra_text("openai-agents", "openai-agents")
        raise ImportError(_text, name=_exc.name) from _exc
    raise

__all__ = ["INVALID_JSON_TEXT", "AgentSession", "function_tools"]
