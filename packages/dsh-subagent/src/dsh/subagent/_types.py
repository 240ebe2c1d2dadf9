"""Value types and protocols of the provider seam."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from types import TracebackType
from typing import Any, Literal, Protocol, Self, runtime_checkable

from dsh.subagent._diagnostics import bound_diagnostic

__all__ = [
    "NO_START_CAPABILITIES",
    "Capabilities",
    "ContentBlock",
    "Descriptor",
    "Parent",
    "ResolvedStartRequest",
    "StopReason",
    "SubagentProvider",
    "SubagentResult",
    "SubagentRun",
    "SubagentStartRequest",
    "TextBlock",
]


class StopReason(StrEnum):
    """Why a run ended. Consumers treat any value they do not know as a failure."""

    COMPLETED = "completed"
    ERROR = "error"
    ABORTED = "aborted"
    MAX_TOKENS = "max-tokens"
    REFUSAL = "refusal"


@runtime_checkable
class ContentBlock(Protocol):
    """Any prompt content block; it names its kind in ``type``."""

    @property
    def type(self) -> str: ...


@dataclass(frozen=True, slots=True)
class TextBlock:
    """A text content block (``type == "text"``)."""

    text: str

    @property
    def type(self) -> Literal["text"]:
        return "text"


@dataclass(frozen=True, slots=True)
class Parent:
    """The delegating session. Product providers read only ``cwd``."""

    session_id: str
    cwd: str | None


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Optional request features a provider supports."""

    output_schema: bool = False
    depth_limit: bool = False
    tool_filter: bool = False
    persona: bool = False
    #: The product stops a run itself once its own cost figure passes the request's
    #: ``max_cost_usd`` (Claude Code's ``--max-budget-usd``).
    cost_limit: bool = False


NO_START_CAPABILITIES = Capabilities()
"""A provider that supports none of the optional request features (both product providers)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Descriptor:
    """What the service tells a provider about the run it is asked to start."""

    version: int = 2
    mode: Literal["one-shot"] = "one-shot"
    provider: str
    label: str | None = None


def _as_tuple(name: str, value: object) -> tuple[Any, ...]:
    if isinstance(value, str | bytes):
        raise TypeError(f"{name} must be a sequence of content blocks, not a string")
    if isinstance(value, tuple):
        return value
    if isinstance(value, Sequence):
        return tuple(value)
    raise TypeError(f"{name} must be a sequence of content blocks")


def _needs(capability: str) -> Any:
    """An optional request field that only a provider with ``capability`` may receive set."""
    return field(default=None, metadata={"capability": capability})


@dataclass(frozen=True, slots=True)
class SubagentStartRequest:
    """A one-shot task for a subagent.

    ``prompt`` is a sequence of content blocks (stored as a tuple). A field made with
    ``_needs(capability)`` is refused by the service, naming the field, when it is set and the
    provider's :class:`Capabilities` lacks ``capability``: a new optional field is declared here
    only (the request crosses processes whole, :meth:`to_json`).
    """

    prompt: Sequence[ContentBlock]
    parent: Parent
    label: str | None = None
    output_schema: Mapping[str, Any] | None = _needs("output_schema")
    max_depth: int | None = _needs("depth_limit")
    tool_filter: Sequence[str] | None = _needs("tool_filter")
    persona: str | None = _needs("persona")
    #: The caller's cost cap in USD, for a product that enforces one itself (docs/liveness.md).
    max_cost_usd: float | None = _needs("cost_limit")

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt", _as_tuple("prompt", self.prompt))

    @classmethod
    def capability_fields(cls) -> tuple[tuple[str, str], ...]:
        """``(field, capability)`` for each optional field a provider must declare it honours."""
        return tuple(
            (f.name, f.metadata["capability"]) for f in fields(cls) if "capability" in f.metadata
        )

    @property
    def texts(self) -> tuple[str, ...]:
        """The text of each prompt block (a provider reads it after its request checks)."""
        return tuple(block.text for block in self.prompt if isinstance(block, TextBlock))

    def to_json(self) -> dict[str, Any]:
        """Every field as plain JSON values, for a request that crosses a process (a Ray job):
        the inverse of :meth:`from_json`. Only text prompt blocks travel (``ValueError``)."""
        return {f.name: _plain(f.name, getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        """The request :meth:`to_json` made; a key this class has no field for is refused
        (``ValueError``), never dropped."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"a start request has no field {unknown[0]!r}")
        values = dict(data)
        values["prompt"] = tuple(_text_block(block) for block in data["prompt"])
        values["parent"] = Parent(**data["parent"])
        return cls(**values)


def _plain(name: str, value: Any) -> Any:
    """``value`` as JSON values: text blocks and dataclasses as objects, sequences as lists."""
    if isinstance(value, TextBlock):
        return {"type": "text", "text": value.text}
    if isinstance(value, Parent):
        return {f.name: getattr(value, f.name) for f in fields(value)}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(key): _plain(name, item) for key, item in value.items()}
    if isinstance(value, Sequence):
        return [_plain(name, item) for item in value]
    raise ValueError(f"the {name!r} field holds a {type(value).__name__}, which cannot travel")


def _text_block(data: Any) -> TextBlock:
    if not isinstance(data, Mapping) or data.get("type") != "text":
        raise ValueError("a start request carries text prompt blocks only")
    return TextBlock(str(data["text"]))


@dataclass(frozen=True, slots=True)
class ResolvedStartRequest(SubagentStartRequest):
    """The request as a provider receives it: the caller's fields plus the ``descriptor``."""

    descriptor: Descriptor = field(kw_only=True)

    @classmethod
    def from_request(cls, request: SubagentStartRequest, descriptor: Descriptor) -> Self:
        """Copy ``request`` and set ``descriptor``."""
        values = {f.name: getattr(request, f.name) for f in fields(SubagentStartRequest)}
        return cls(**values, descriptor=descriptor)


@dataclass(frozen=True, slots=True)
class SubagentResult:
    """How a run ended.

    ``output`` is stored as a tuple. ``diagnostic`` is dropped on ``completed`` results and bounded
    with :func:`bound_diagnostic` otherwise. A stop-reason string that names a known reason is
    stored as the :class:`StopReason`; an unknown string is kept as given (consumers treat it as a
    failure).
    """

    stop_reason: StopReason
    output: tuple[TextBlock, ...] = ()
    diagnostic: str | None = None
    structured_output: Any = None
    """The answer parsed as JSON and checked against the request's ``output_schema`` (the
    service sets it on a completed run whose request had one; ``output`` is then the value as
    compact JSON). ``None`` otherwise: read ``output`` to tell a JSON ``null`` apart."""

    def __post_init__(self) -> None:
        reason: object = self.stop_reason
        if isinstance(reason, str) and not isinstance(reason, StopReason):
            with contextlib.suppress(ValueError):
                object.__setattr__(self, "stop_reason", StopReason(reason))
        if not isinstance(self.output, tuple):
            object.__setattr__(self, "output", _as_tuple("output", self.output))
        if self.diagnostic is not None:
            if self.stop_reason == StopReason.COMPLETED:
                object.__setattr__(self, "diagnostic", None)
            else:
                object.__setattr__(self, "diagnostic", bound_diagnostic(self.diagnostic))

    @property
    def text(self) -> str:
        """The output blocks' text, joined with ``""``."""
        return "".join(block.text for block in self.output)


@runtime_checkable
class SubagentRun(Protocol):
    """A published run. Also an async context manager whose exit is :meth:`aclose`."""

    @property
    def id(self) -> str:
        """Unique per run."""
        ...

    async def result(self) -> SubagentResult:
        """The settled result. Never raises for child failures. Cancelling the awaiting task does
        not cancel the run."""
        ...

    def cancel(self, reason: str | None = None) -> None:
        """Settle ``aborted`` at once (if not settled) and ask the product to stop. Idempotent."""
        ...

    async def aclose(self) -> None:
        """Cancel if still open, then return after whole-tree exit. Idempotent."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class SubagentProvider(Protocol):
    """Starts one-shot runs of one kind of subagent."""

    @property
    def name(self) -> str: ...

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def inherits_parent_context(self) -> bool: ...

    async def start(self, request: ResolvedStartRequest) -> SubagentRun:
        """Return only once the run is published; before that, own cleanup and raise."""
        ...
