"""dsh.subagent_claude_code: the Claude Code provider for ``dsh.subagent``.

Runs the Claude Code CLI bundled in the pinned ``claude-agent-sdk`` wheel through our own
implementation of the SDK's ``Transport`` ABC, so ``dsh.subprocess`` owns the process tree. The
loopback Messages fixture lives in :mod:`dsh.subagent_claude_code.testing`.
"""

from dsh.subagent_claude_code._provider import ClaudeCodeProvider
from dsh.subagent_claude_code._run import ClaudeCodeRun
from dsh.subagent_claude_code.config import (
    CLAUDE_CREDENTIAL_ENV,
    ClaudeCodeProviderConfig,
    PermissionMode,
)

__all__ = [
    "CLAUDE_CREDENTIAL_ENV",
    "ClaudeCodeProvider",
    "ClaudeCodeProviderConfig",
    "ClaudeCodeRun",
    "PermissionMode",
]
