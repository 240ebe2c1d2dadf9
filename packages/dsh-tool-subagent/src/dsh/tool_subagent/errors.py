"""Errors raised by :mod:`dsh.tool_subagent`.

One tree; every message is safe to show::

    ToolSubagentError
    ├── MountError      a tool config that cannot be mounted (unknown provider, max_depth rule)
    └── ProfileError    a profile that fails to parse or validate; names table, index and field
"""

__all__ = ["MountError", "ProfileError", "ToolSubagentError"]


class ToolSubagentError(Exception):
    """Base of every error :mod:`dsh.tool_subagent` raises."""


class MountError(ToolSubagentError, ValueError):
    """A delegation tool cannot be mounted on this harness."""


class ProfileError(ToolSubagentError, ValueError):
    """A profile is not valid TOML or breaks a rule; the message names where."""
