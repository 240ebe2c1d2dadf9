"""dsh's tools as a pydantic-ai toolset (extra ``dsh-tool-subagent[pydantic-ai]``).

``DshToolset(harness)`` gives a pydantic-ai ``Agent`` every tool of a profile with the names,
schemas and texts ``dsh mcp`` serves; see ``docs/frameworks.md``. Without pydantic-ai installed,
importing this module raises an ``ImportError`` that names the extra.
"""

from dsh.tool_subagent._agent_session import AgentSession
from dsh.tool_subagent._extras import framework_missing, missing_extra_text

try:
    from dsh.tool_subagent._pydantic_ai import DshToolset
except ImportError as _exc:
    if framework_missing(_exc, ("pydantic_ai", "pydantic_core")):
        _text = missing_extra_text("pydantic-ai", "pydantic-ai")
        raise ImportError(_text, name=_exc.name) from _exc
    raise

__all__ = ["AgentSession", "DshToolset"]
