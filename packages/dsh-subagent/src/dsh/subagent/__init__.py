"""dsh.subagent."""

__all__: list[str] = []
