"""Errors raised by the Claude Code provider.

The provider adds no error classes of its own; it raises the seam's::

    Exception
    ├── dsh.subagent.ProductFailure   start() rejected the request or the CLI failed to start
    │                                 (``subagent-claude-code: <failure line>``; raw cause on
    │                                 ``__cause__``); aclose() raises it with stage ``teardown``
    └── ExceptionGroup                startup failed and its rollback failed too: both safe lines
                                      in the message, both ProductFailures in ``.exceptions``
    pydantic.ValidationError          ClaudeCodeProviderConfig rejected a field (names the field)

Messages never carry task text, paths, environment values, credentials, stderr or payloads.
"""

from dsh.subagent import ProductFailure

__all__ = ["ProductFailure"]
