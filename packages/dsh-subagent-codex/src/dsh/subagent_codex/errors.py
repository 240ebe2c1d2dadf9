"""Errors raised by the Codex provider.

The provider adds no exception classes of its own; it raises the seam's tree::

    dsh.subagent.SubagentError
    └── dsh.subagent.ProductFailure    start() rejections and startup failures
                                       ("subagent-codex: Product subagent failure (...)"),
                                       and aclose() teardown failures (stage: teardown)
    ExceptionGroup                     startup failed and the rollback teardown failed too; the
                                       message holds both safe lines, the members are the two
                                       ProductFailure instances
    pydantic.ValidationError           CodexProviderConfig / from_config() field rule violations

After ``start()`` has returned, failures never raise: they settle ``result()``.
Raw causes are chained on ``__cause__`` and logged at DEBUG only.
"""

from dsh.subagent import ProductFailure

__all__ = ["ProductFailure"]
