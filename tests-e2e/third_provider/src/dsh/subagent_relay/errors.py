"""Errors raised by the Relay provider.

The provider adds no error classes of its own; it raises the seam's::

    Exception
    ├── dsh.subagent.ProductFailure   start() rejected the request or the agent failed to start
    │                                 (``subagent-relay: <failure line>``; raw cause on
    │                                 ``__cause__``); aclose() raises it with stage ``teardown``
    └── ExceptionGroup                startup failed and its rollback failed too
    pydantic.ValidationError          RelayProviderConfig rejected a field (names the field)

Messages never carry task text, paths, environment values, credentials, stderr or payloads.
"""

from dsh.subagent import ProductFailure

__all__ = ["ProductFailure"]
