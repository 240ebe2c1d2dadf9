"""Errors raised by the subagent seam.

One tree::

    Exception
    └── SubagentError                 .code names the rule that was broken
        │   DUPLICATE_PROVIDER        register(): the name is already taken
        │   REGISTRATION_REJECTED     register(): a ProviderAdded listener raised (rolled back)
        │   NO_PROVIDER               start(): no provider is registered under the name
        │   UNSUPPORTED_CAPABILITY    start(): the request asks for a capability the provider lacks
        │   INVALID_REQUEST           start(): a request field breaks its rule (max_depth)
        │   SERVICE_CLOSED            start(): the service was closed
        │   UNKNOWN_PROVIDER_KIND     load_provider(): no entry point of that kind is installed
        │   PROVIDER_LOAD_FAILED      load_provider(): the entry point failed to import or build
        │   INVALID_PROVIDER_CONFIG   load_provider(): the config failed the provider's validation
        └── ProductFailure            code PRODUCT_FAILURE; a product subagent failed to start
                                      (.facts holds the FailureFacts when there are any)

Every message is safe to show to a model: it never carries task text, paths, environment values,
credentials, stderr or protocol payloads. Raw causes are chained on ``__cause__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from dsh.subagent._diagnostics import FailureFacts

__all__ = ["ProductFailure", "SubagentError"]


class SubagentError(Exception):
    """A safe error from the subagent seam; ``code`` is a stable UPPER_SNAKE identifier."""

    code: str

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code

    @property
    def message(self) -> str:
        """The safe message (the same as ``str(error)``)."""
        return str(self.args[0]) if self.args else ""


class ProductFailure(SubagentError):
    """A product subagent failed; ``str()`` is the safe message ``"<prefix>: <failure line>"``.

    Startup rejections of product providers raise it. ``facts`` is ``None`` for rejections that are
    not product failures (for example a parent without a working directory).
    """

    facts: FailureFacts | None

    def __init__(self, message: str, facts: FailureFacts | None = None) -> None:
        super().__init__(message, code="PRODUCT_FAILURE")
        self.facts = facts

    @classmethod
    def from_facts(cls, prefix: str, facts: FailureFacts, *, fact_line: str | None = None) -> Self:
        """Build ``"<prefix>: <failure line>"`` (plus ``"\\n<fact_line>"`` when given).

        ``prefix`` may be given with or without its trailing colon (``"subagent-codex:"`` or
        ``"subagent-codex"``).
        """
        from dsh.subagent._diagnostics import failure_line

        message = f"{prefix.rstrip().rstrip(':')}: {failure_line(facts)}"
        if fact_line:
            message = f"{message}\n{fact_line}"
        return cls(message, facts)
