"""dsh.subagent_claude_code: the Claude Code provider for ``dsh.subagent``.

Runs the Claude Code CLI bundled in the pinned ``claude-agent-sdk`` wheel through our own
implementation of the SDK's ``Transport`` ABC, so ``dsh.subprocess`` owns the process tree. The
loopback Messages fixture lives in :mod:`dsh.subagent_claude_code.testing`.
"""

import typing as _typing

from dsh.subagent_claude_code._provider import ClaudeCodeProvider
from dsh.subagent_claude_code.config import (
    CLAUDE_CREDENTIAL_ENV,
    ClaudeCodeProviderConfig,
    PermissionMode,
)
from dsh.subprocess.lazy import package_getattr as _package_getattr

if _typing.TYPE_CHECKING:
    from dsh.subagent_claude_code._run import ClaudeCodeRun

# The run imports claude-agent-sdk (and with it the MCP SDK): imported when it is asked for, so
# that building the provider (`dsh mcp` listing its tools) does not; so is __version__.
_LAZY = {"ClaudeCodeRun": "dsh.subagent_claude_code._run"}
__getattr__ = _package_getattr(__name__, distribution="dsh-subagent-claude-code", lazy=_LAZY)

__all__ = [
    "CLAUDE_CREDENTIAL_ENV",
    "ClaudeCodeProvider",
    "ClaudeCodeProviderConfig",
    "ClaudeCodeRun",
    "PermissionMode",
]
