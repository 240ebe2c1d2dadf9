"""SubagentService: registry errors, capability checks, events."""

import asyncio
import logging
import time

import pytest

from dsh.subagent import (
    Capabilities,
    Parent,
    ProviderAdded,
    ProviderRemoved,
    StopReason,
    SubagentEnded,
    SubagentError,
    SubagentEvent,
    SubagentResult,
    SubagentService,
    SubagentStarted,
    SubagentStartRequest,
    TextBlock,
    UsageFacts,
)
from dsh.subagent.testing import FakeProvider


def _request(**fields: object) -> SubagentStartRequest:
    return SubagentStartRequest([TextBlock("hello")], Parent("s", "/tmp"), **fields)  # type: ignore[arg-type]


async def test_duplicate_provider_keeps_first() -> None:
    async with SubagentService() as service:
        first = FakeProvider("p")
        service.register(first)
        with pytest.raises(SubagentError) as info:
            service.register(FakeProvider("p"))
        assert info.value.code == "DUPLICATE_PROVIDER"
        assert str(info.value) == 'a subagent provider named "p" is already registered'
        assert service.get("p") is first


async def test_no_provider_and_unregister() -> None:
    async with SubagentService() as service:
        with pytest.raises(SubagentError) as info:
            await service.start("nope", _request())
        assert info.value.code == "NO_PROVIDER"
        assert str(info.value) == 'no subagent provider registered for "nope"'
        provider = FakeProvider("p", delay=None)
        unregister = service.register(provider)
        service.register(FakeProvider("q"))
        assert service.names() == ("p", "q")
        run = await service.start("p", _request())
        unregister()
        unregister()
        assert service.names() == ("q",)
        assert service.get("p") is None
        with pytest.raises(SubagentError, match="no subagent provider registered"):
            await service.start("p", _request())
        # The published run is not revoked.
        run.inner.finish()  # type: ignore[attr-defined]
        assert (await run.result()).text == "hello"
        await run.aclose()


@pytest.mark.parametrize(
    ("fields", "cap"),
    [
        ({"output_schema": {}, "max_depth": 1}, "output_schema"),
        ({"max_depth": 1, "tool_filter": ["x"]}, "max_depth"),
        ({"tool_filter": ["x"], "persona": "p"}, "tool_filter"),
        ({"persona": "p"}, "persona"),
    ],
)
async def test_unsupported_capability_order(fields: dict[str, object], cap: str) -> None:
    async with SubagentService() as service:
        provider = FakeProvider("p")
        service.register(provider)
        events: list[SubagentEvent] = []
        service.subscribe(events.append)
        with pytest.raises(SubagentError) as info:
            await service.start("p", _request(**fields))
        assert info.value.code == "UNSUPPORTED_CAPABILITY"
        assert str(info.value) == f'subagent provider "p" does not support the "{cap}" capability'
        assert provider.requests == []
        assert events == []


@pytest.mark.parametrize("depth", [-1, True, 1.5])
async def test_max_depth_rule(depth: object) -> None:
    async with SubagentService() as service:
        service.register(FakeProvider("p", capabilities=Capabilities(depth_limit=True)))
        with pytest.raises(SubagentError) as info:
            await service.start("p", _request(max_depth=depth))
        assert info.value.code == "INVALID_REQUEST"
        run = await service.start("p", _request(max_depth=0))
        await run.aclose()


async def test_descriptor_and_events() -> None:
    async with SubagentService() as service:
        provider = FakeProvider("p")
        events: list[SubagentEvent] = []
        seen_async: list[SubagentEvent] = []

        async def async_listener(event: SubagentEvent) -> None:
            await asyncio.sleep(0)
            seen_async.append(event)

        service.subscribe(events.append)
        service.subscribe(async_listener)
        service.register(provider)
        run = await service.start("p", _request(label="job"))
        assert provider.requests[0].descriptor.provider == "p"
        assert provider.requests[0].descriptor.label == "job"
        assert provider.requests[0].descriptor.version == 2
        started = [e for e in events if isinstance(e, SubagentStarted)]
        assert len(started) == 1  # emitted before start() returned
        result = await run.result()
        await run.aclose()
        await run.aclose()
        ended = [e for e in events if isinstance(e, SubagentEnded)]
        assert ended == [
            SubagentEnded(started[0].run_id, "p", run.id, StopReason.COMPLETED, "hello")
        ]
        assert started[0] == SubagentStarted(run.run_id, "p", run.id)
        assert result.text == "hello"
        second = await service.start("p", _request())
        second.cancel()
        assert (await second.result()).stop_reason is StopReason.ABORTED
        runs = {e.run_id for e in events if isinstance(e, SubagentStarted)}
        assert len(runs) == 2
        ends = [e for e in events if isinstance(e, SubagentEnded)]
        assert ends[-1].last_assistant_message is None
        await second.aclose()
    assert isinstance(events[0], ProviderAdded)
    # Async listeners see every event too; run events are awaited inline, in order.
    run_events = [e for e in events if not isinstance(e, ProviderAdded)]
    assert [e for e in seen_async if not isinstance(e, ProviderAdded)] == run_events
    assert ProviderAdded("p") in seen_async


async def test_watcher_emits_end_without_result_call() -> None:
    async with SubagentService() as service:
        service.register(FakeProvider("p", delay=0.01))
        ended = asyncio.Event()
        service.subscribe(lambda e: ended.set() if isinstance(e, SubagentEnded) else None)
        run = await service.start("p", _request())
        async with asyncio.timeout(5):
            await ended.wait()
        await run.aclose()


async def test_end_emitted_after_service_closed() -> None:
    events: list[SubagentEvent] = []
    service = SubagentService()
    service.subscribe(events.append)
    service.register(FakeProvider("p", delay=None))
    run = await service.start("p", _request())
    await service.aclose()
    with pytest.raises(SubagentError) as info:
        await service.start("p", _request())
    assert info.value.code == "SERVICE_CLOSED"
    await run.aclose()
    assert [type(e) for e in events] == [ProviderAdded, SubagentStarted, SubagentEnded]


async def test_rejected_start_emits_nothing() -> None:
    async with SubagentService() as service:
        service.register(FakeProvider("p", start_error=RuntimeError("boom")))
        events: list[SubagentEvent] = []
        service.subscribe(events.append)
        with pytest.raises(RuntimeError):
            await service.start("p", _request())
        assert events == []


async def test_raising_listeners_change_nothing(caplog: pytest.LogCaptureFixture) -> None:
    async with SubagentService() as service:
        seen: list[SubagentEvent] = []

        def bad(event: SubagentEvent) -> None:
            if not isinstance(event, ProviderAdded):
                raise RuntimeError("secret listener text")

        async def bad_async(event: SubagentEvent) -> None:
            raise RuntimeError("secret async text")

        service.register(FakeProvider("p"))
        service.subscribe(bad)
        service.subscribe(bad_async)
        service.subscribe(seen.append)
        with caplog.at_level(logging.INFO, logger="dsh.subagent"):
            run = await service.start("p", _request())
            result = await run.result()
            await run.aclose()
        assert result.stop_reason is StopReason.COMPLETED
        assert [type(e) for e in seen] == [SubagentStarted, SubagentEnded]
        assert all("secret" not in r.getMessage() for r in caplog.records)
        assert any("listener raised" in r.getMessage() for r in caplog.records)


async def test_raising_provider_added_rolls_back() -> None:
    async with SubagentService() as service:
        seen: list[SubagentEvent] = []
        service.subscribe(seen.append)

        def veto(event: SubagentEvent) -> None:
            if isinstance(event, ProviderAdded) and event.name == "p":
                raise RuntimeError("no")

        unsubscribe = service.subscribe(veto)
        with pytest.raises(SubagentError) as info:
            service.register(FakeProvider("p"))
        assert info.value.code == "REGISTRATION_REJECTED"
        assert service.names() == ()
        assert seen == [ProviderAdded("p"), ProviderRemoved("p")]
        unsubscribe()
        service.register(FakeProvider("p"))
        assert service.names() == ("p",)


async def test_raising_result_is_reported_as_error() -> None:
    class Broken(FakeProvider):
        async def start(self, request):  # type: ignore[no-untyped-def]
            run = await super().start(request)

            async def result() -> SubagentResult:
                raise RuntimeError("raw")

            run.result = result  # type: ignore[method-assign]
            return run

    async with SubagentService() as service:
        service.register(Broken("b"))
        run = await service.start("b", _request())
        result = await run.result()
        assert result.stop_reason is StopReason.ERROR
        assert result.diagnostic == 'subagent provider "b" failed to report a result'
        await run.aclose()


async def test_the_published_run_forwards_the_provider_runs_usage() -> None:
    facts = UsageFacts(input_tokens=3, output_tokens=4)
    async with SubagentService() as service:
        service.register(FakeProvider("c", usage=facts))
        service.register(FakeProvider("plain"))
        counted = await service.start("c", _request())
        plain = await service.start("plain", _request())
        await counted.result()
        assert counted.usage is facts
        assert counted.first_activity is not None
        assert counted.first_activity <= time.monotonic()
        assert plain.usage is None  # a provider that reports none
        await counted.aclose()
        await plain.aclose()
