"""dsh.subprocess."""

__all__: list[str] = []
