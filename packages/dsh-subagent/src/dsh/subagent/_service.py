"""``SubagentService``: the named provider registry and its lifecycle events."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Self

from dsh.subagent._activity import first_activity, last_activity
from dsh.subagent._events import (
    Listener,
    Listeners,
    ProviderAdded,
    ProviderRemoved,
    SubagentEnded,
    SubagentStarted,
)
from dsh.subagent._output_schema import check_output_schema, structured_result
from dsh.subagent._types import (
    Descriptor,
    ResolvedStartRequest,
    StopReason,
    SubagentProvider,
    SubagentResult,
    SubagentRun,
    SubagentStartRequest,
)
from dsh.subagent._usage import UsageFacts, UsageWatch, watch_usage
from dsh.subagent.errors import SubagentError

__all__ = ["PublishedRun", "SubagentService"]

_log = logging.getLogger("dsh.subagent")


class PublishedRun:
    """The run ``SubagentService.start`` hands out: the provider's run plus the end event.

    It forwards ``id``, ``result()``, ``cancel()`` and ``aclose()`` to the provider's run
    (``inner``); with an ``output_schema`` (the request's), a completed result is checked against
    it here, whatever the provider claims (``_output_schema.structured_result``).
    The first ``result()`` to obtain the settled result (the service's watcher, or any
    caller) emits ``SubagentEnded`` exactly once; every ``result()`` returns only after that
    delivery. ``aclose()`` closes the inner run and then makes sure the end was emitted, so the
    event does not depend on the service's watcher still running.
    """

    def __init__(
        self,
        listeners: Listeners,
        inner: SubagentRun,
        *,
        run_id: str,
        provider: str,
        output_schema: Mapping[str, Any] | None = None,
        product: str | None = None,
    ) -> None:
        self._listeners = listeners
        self._output_schema = output_schema
        self._product = product or provider
        self._inner = inner
        self._inner_id = inner.id
        self.run_id = run_id
        self.provider = provider
        self._final: SubagentResult | None = None
        self._ended = asyncio.Event()
        self.delivering = False

    @property
    def id(self) -> str:
        return self._inner_id

    @property
    def last_activity(self) -> float | None:
        """The provider run's activity stamp (``None`` when it reports none)."""
        return last_activity(self._inner)

    @property
    def first_activity(self) -> float | None:
        """The provider run's first product message after its task (``None``: none or unknown)."""
        return first_activity(self._inner)

    @property
    def usage(self) -> UsageFacts | None:
        """The provider run's usage facts, host-only (``None`` when it reports none)."""
        usage = getattr(self._inner, "usage", None)
        return usage if isinstance(usage, UsageFacts) else None

    def watch_usage(self, callback: UsageWatch) -> Callable[[], None] | None:
        """The provider run's usage reports as they happen (``None``: it offers none)."""
        return watch_usage(self._inner, callback)

    @property
    def inner(self) -> SubagentRun:
        """The provider's own run object."""
        return self._inner

    @property
    def ended(self) -> bool:
        """Whether ``SubagentEnded`` has been emitted."""
        return self._ended.is_set()

    async def _obtain(self) -> SubagentResult:
        outcome = await self._obtain_inner()
        if self._output_schema is None:
            return outcome
        return structured_result(outcome, self._output_schema, self._product)

    async def _obtain_inner(self) -> SubagentResult:
        try:
            return await self._inner.result()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            _log.warning(
                'subagent provider "%s" raised from result(); reported as an error', self.provider
            )
            _log.debug("provider result() failure", exc_info=error)
            return SubagentResult(
                StopReason.ERROR,
                (),
                f'subagent provider "{self.provider}" failed to report a result',
            )

    async def result(self) -> SubagentResult:
        if self._final is None:
            outcome = await self._obtain()
            if self._final is None:
                self._final = outcome
                self.delivering = True
                try:
                    await self._listeners.emit(
                        SubagentEnded(
                            run_id=self.run_id,
                            provider=self.provider,
                            id=self._inner_id,
                            stop_reason=outcome.stop_reason,
                            last_assistant_message=outcome.text if outcome.output else None,
                        )
                    )
                finally:
                    self.delivering = False
                    self._ended.set()
        await self._ended.wait()
        assert self._final is not None
        return self._final

    def cancel(self, reason: str | None = None) -> None:
        self._inner.cancel(reason)

    async def aclose(self) -> None:
        failure: Exception | None = None
        try:
            await self._inner.aclose()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            failure = error
            self._inner.cancel()
        await self.result()
        if failure is not None:
            raise failure

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _product_name(provider: SubagentProvider) -> str | None:
    """The product's display name for failure facts (a ``ProductProvider``'s ``product``)."""
    product = getattr(provider, "product", None)
    return product if isinstance(product, str) and product else None


class SubagentService:
    """The named provider registry.

    Use it as ``async with SubagentService() as service:`` or call :meth:`aclose`: the service
    owns one watcher task per published run (it emits ``SubagentEnded`` as soon as the result
    settles) and the tasks of async listeners of provider events. Closing cancels and awaits them;
    it does not close published runs, which belong to whoever started them (their ``result()`` and
    ``aclose()`` still emit ``SubagentEnded``).
    """

    def __init__(self) -> None:
        self._providers: dict[str, SubagentProvider] = {}
        self._listeners = Listeners()
        self._watchers: dict[asyncio.Task[None], PublishedRun] = {}
        self._closed = False

    # registry

    def register(self, provider: SubagentProvider) -> Callable[[], None]:
        """Register ``provider`` under ``provider.name``; return the unregister function."""
        if not isinstance(provider, SubagentProvider):
            raise TypeError("register() takes a SubagentProvider")
        name = provider.name
        if not isinstance(name, str) or not name:
            raise ValueError("a subagent provider's name must be a non-empty string")
        if name in self._providers:
            raise SubagentError(
                f'a subagent provider named "{name}" is already registered',
                code="DUPLICATE_PROVIDER",
            )
        self._providers[name] = provider
        rejected = self._listeners.emit_sync(ProviderAdded(name), stop_on_error=True)
        if rejected is not None:
            index, error = rejected
            if self._providers.get(name) is provider:
                del self._providers[name]
            self._listeners.emit_sync(ProviderRemoved(name), limit=index)
            raise SubagentError(
                f'a listener rejected the subagent provider "{name}"; '
                "the registration was rolled back",
                code="REGISTRATION_REJECTED",
            ) from error

        def unregister() -> None:
            if self._providers.get(name) is provider:
                del self._providers[name]
                self._listeners.emit_sync(ProviderRemoved(name))

        return unregister

    def get(self, name: str) -> SubagentProvider | None:
        """The provider registered under ``name``, or ``None``."""
        return self._providers.get(name)

    def names(self) -> tuple[str, ...]:
        """Registered names, in registration order."""
        return tuple(self._providers)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Subscribe a plain callable or a coroutine function; return the unsubscribe function."""
        return self._listeners.subscribe(listener)

    # runs

    def check(self, name: str, request: SubagentStartRequest) -> SubagentProvider:
        """The checks :meth:`start` makes before anything starts: a provider registered as
        ``name`` that supports every field ``request`` sets, and a valid ``max_depth``. Returns
        the provider; raises :class:`SubagentError`. An ``output_schema`` must be a valid JSON
        Schema object within ``MAX_OUTPUT_SCHEMA_BYTES``; a provider with a
        ``request_problem(request)`` (``kit.ProductProvider``: the product's own limits, such as
        its longest prompt) is asked too. A caller that runs the request elsewhere
        (a Ray job) checks it here first, so nothing is queued that the provider would refuse."""
        if not isinstance(request, SubagentStartRequest):
            raise TypeError("start() takes a SubagentStartRequest")
        provider = self._providers.get(name)
        if provider is None:
            raise SubagentError(f'no subagent provider registered for "{name}"', code="NO_PROVIDER")
        capabilities = provider.capabilities
        for request_field, capability in SubagentStartRequest.capability_fields():
            if getattr(request, request_field) is not None and not getattr(
                capabilities, capability
            ):
                raise SubagentError(
                    f'subagent provider "{name}" does not support the "{request_field}" capability',
                    code="UNSUPPORTED_CAPABILITY",
                )
        if request.output_schema is not None:
            try:
                check_output_schema(request.output_schema)
            except ValueError as exc:
                raise SubagentError(
                    f'the "output_schema" field {exc}', code="INVALID_REQUEST"
                ) from None
        problem = getattr(provider, "request_problem", None)  # a ProductProvider's own limits
        text = problem(request) if callable(problem) else None
        if isinstance(text, str):
            raise SubagentError(f'subagent provider "{name}": {text}', code="INVALID_REQUEST")
        depth = request.max_depth
        if depth is not None and (
            not isinstance(depth, int) or isinstance(depth, bool) or depth < 0
        ):
            raise SubagentError(
                'the "max_depth" field must be a non-negative integer', code="INVALID_REQUEST"
            )
        return provider

    async def start(self, name: str, request: SubagentStartRequest) -> PublishedRun:
        """Validate, resolve and start ``request`` on the provider registered as ``name``."""
        if self._closed:
            raise SubagentError("the subagent service is closed", code="SERVICE_CLOSED")
        provider = self.check(name, request)
        resolved = ResolvedStartRequest.from_request(
            request, Descriptor(provider=name, label=request.label)
        )
        inner = await provider.start(resolved)
        run = PublishedRun(
            self._listeners,
            inner,
            run_id=str(uuid.uuid4()),
            provider=name,
            output_schema=request.output_schema,
            product=_product_name(provider),
        )
        try:
            await self._listeners.emit(SubagentStarted(run_id=run.run_id, provider=name, id=run.id))
        except BaseException:
            # Cancelled while delivering: the caller never receives the run, so close it here.
            await run.aclose()
            raise
        self._watch(run)
        return run

    def _watch(self, run: PublishedRun) -> None:
        task = asyncio.create_task(self._watch_run(run), name=f"dsh.subagent end {run.run_id}")
        self._watchers[task] = run
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._watchers.pop(task, None)

    @staticmethod
    async def _watch_run(run: PublishedRun) -> None:
        await run.result()

    # lifetime

    @property
    def closed(self) -> bool:
        return self._closed

    async def aclose(self) -> None:
        """Refuse new starts, then cancel and await the service's own tasks. Idempotent.

        A watcher that is already delivering ``SubagentEnded`` is allowed to finish.
        """
        self._closed = True
        while self._watchers:
            watchers = dict(self._watchers)
            for task, run in watchers.items():
                if not run.delivering:
                    task.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)
            for task in watchers:
                self._watchers.pop(task, None)
        await self._listeners.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
