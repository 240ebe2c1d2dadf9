"""dsh.subagent_claude_code."""

__all__: list[str] = []
