"""dsh.subagent_claude_code: the Claude Code provider for ``dsh.subagent``.

Runs the Claude Code CLI bundled in the pinned ``claude-agent-sdk`` wheel through our own
implementation of the SDK's ``Transport`` ABC, so ``dsh.subprocess`` owns the process tree. The
loopback Messages fixture lives in :mod:`dsh.subagent_claude_code.testing`.
"""

import importlib as _importlib
import typing as _typing
from importlib import metadata as _metadata

from dsh.subagent_claude_code._provider import ClaudeCodeProvider
from dsh.subagent_claude_code.config import (
    CLAUDE_CREDENTIAL_ENV,
    ClaudeCodeProviderConfig,
    PermissionMode,
)

if _typing.TYPE_CHECKING:
    from dsh.subagent_claude_code._run import ClaudeCodeRun

# The run imports claude-agent-sdk (and with it the MCP SDK): imported when it is asked for, so
# that building the provider (`dsh mcp` listing its tools) does not (PEP 562).
_LAZY = {"ClaudeCodeRun": "dsh.subagent_claude_code._run"}


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


try:
    __version__ = _metadata.version("dsh-subagent-claude-code")
except _metadata.PackageNotFoundError:  # imported from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "CLAUDE_CREDENTIAL_ENV",
    "ClaudeCodeProvider",
    "ClaudeCodeProviderConfig",
    "ClaudeCodeRun",
    "PermissionMode",
]
