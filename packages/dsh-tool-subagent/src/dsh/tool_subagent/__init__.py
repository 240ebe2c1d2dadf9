"""dsh.tool_subagent."""

__all__: list[str] = []
