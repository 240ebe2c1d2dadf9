"""dsh.jobs."""

__all__: list[str] = []
