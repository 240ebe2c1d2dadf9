"""Errors raised by :mod:`dsh.tool_subagent`.

One tree; every message is safe to show::

    ToolSubagentError
    ├── MountError      a tool config that cannot be mounted (unknown provider, max_depth rule)
    └── ProfileError    a profile that fails to parse or validate; names table, index and field

Both carry the failing field as ``field`` as well as in their text, so a caller (the profile
builder, a host) never has to work it out from the message.
"""

__all__ = ["MountError", "ProfileError", "ToolSubagentError"]


class ToolSubagentError(Exception):
    """Base of every error :mod:`dsh.tool_subagent` raises."""


class MountError(ToolSubagentError, ValueError):
    """A delegation tool cannot be mounted; ``field`` is the config field at fault.

    ``"provider"`` (no such provider registered) or ``"max_depth"`` (the provider cannot
    enforce one).
    """

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class ProfileError(ToolSubagentError, ValueError):
    """A profile is not valid TOML or breaks a rule; the message names where.

    ``field`` is that place as the message writes it (``tool[0].max_depth``; the first one when
    several fields fail), or ``None`` when the whole file is at fault (unreadable, not TOML).
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
