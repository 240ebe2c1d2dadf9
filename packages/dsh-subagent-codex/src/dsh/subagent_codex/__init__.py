"""dsh.subagent_codex."""

__all__: list[str] = []
