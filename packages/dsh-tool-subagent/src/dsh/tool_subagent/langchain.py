"""dsh's tools as LangChain tools (extra ``dsh-tool-subagent[langchain]``).

``langchain_tools(session)`` gives a LangChain or LangGraph agent every tool of a profile with
the names, schemas and texts ``dsh mcp`` serves, called as one :class:`AgentSession`; see
``docs/frameworks.md``. Without ``langchain-core`` installed, importing this module raises an
``ImportError`` that names the extra.
"""

from dsh.tool_subagent._agent_session import AgentSession
from dsh.tool_subagent._extras import framework_missing, missing_extra_text

try:
    from dsh.tool_subagent._langchain import DshTool, langchain_tools
except ImportError as _exc:
    if framework_missing(_exc, ("langchain_core",)):
        _text = missing_extra_text("langchain", "langchain")
        raise ImportError(_text, name=_exc.name) from _exc
    raise

__all__ = ["AgentSession", "DshTool", "langchain_tools"]
