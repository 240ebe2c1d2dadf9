"""``WarmPool``'s own rules, with plain objects for warm processes (no product involved).

The real-product guarantees (one run per process, nothing left after a runtime close or a host
crash, a cwd miss, an idle death) are in tests-e2e/reliability/test_warm.py.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Hashable
from dataclasses import dataclass

from dsh.subagent.kit import WarmPool


@dataclass(eq=False)
class Warm:
    key: Hashable
    alive: bool = True
    closed: bool = False
    killed: bool = False


class Maker:
    def __init__(self) -> None:
        self.made: list[Warm] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def make(self, key: Hashable) -> Warm:
        await self.gate.wait()
        warm = Warm(key)
        self.made.append(warm)
        return warm


def _pool(maker: Maker, size: int = 1) -> WarmPool[Warm]:
    async def close(warm: Warm) -> None:
        warm.closed = True

    def kill(warm: Warm) -> None:
        warm.killed = True

    return WarmPool(size, make=maker.make, alive=lambda w: w.alive, close=close, kill=kill)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def _one_idle_for_a() -> tuple[WarmPool[Warm], Warm]:
    """A pool of one whose key is ``a``, filled: the pool and its idle object."""
    pool = _pool(Maker())
    await pool.take("a")
    pool.replenish("a")
    await _settle()
    [warm] = pool.idle()
    return pool, warm


async def test_a_take_never_spawns_and_replenish_fills_up_to_size() -> None:
    maker = Maker()
    pool = _pool(maker, size=2)
    assert await pool.take("a") is None  # first key: a miss, nothing spawned
    await _settle()
    assert maker.made == []
    pool.replenish("a")
    await _settle()
    assert len(pool.idle()) == 2
    warm = await pool.take("a")
    assert warm is maker.made[0]
    assert warm not in pool.idle()  # handed out once, never again
    await _settle()
    assert len(maker.made) == 2  # no refill until replenish
    await pool.aclose()


async def test_replenish_after_waits_for_the_result() -> None:
    maker = Maker()
    pool = _pool(maker)
    await pool.take("a")
    result: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    pool.replenish_after(result, "a")
    await _settle()
    assert maker.made == []
    result.set_result(None)
    await _settle()
    assert len(pool.idle()) == 1
    await pool.aclose()


async def test_a_pool_closed_at_once_leaves_no_result_unawaited() -> None:
    maker = Maker()
    pool = _pool(maker)
    await pool.take("a")

    async def result() -> None:
        return None

    done = result()
    pool.replenish_after(done, "a")
    await pool.aclose()  # before the waiting task took its first step
    # Closed, not left for the interpreter's "was never awaited" warning.
    assert inspect.getcoroutinestate(done) == "CORO_CLOSED"
    assert maker.made == []


async def test_a_dead_idle_object_is_closed_not_handed_out() -> None:
    pool, warm = await _one_idle_for_a()
    warm.alive = False
    assert await pool.take("a") is None
    await _settle()
    assert warm.closed
    assert (pool.dead_idle, pool.taken) == (1, 0)
    await pool.aclose()


async def test_a_new_key_closes_the_idle_ones() -> None:
    pool, old = await _one_idle_for_a()
    assert await pool.take("b") is None
    await _settle()
    assert old.closed
    pool.replenish("a")  # not the latest key: nothing
    await _settle()
    assert pool.idle() == []
    await pool.aclose()


async def test_a_take_waits_for_one_being_warmed_and_only_one_take_waits() -> None:
    maker = Maker()
    pool = _pool(maker)
    await pool.take("a")
    maker.gate.clear()
    pool.replenish("a")
    first = asyncio.create_task(pool.take("a"))
    await _settle()
    assert not first.done()
    assert await pool.take("a") is None  # the one in flight is claimed: cold
    maker.gate.set()
    warm = await first
    assert warm is maker.made[0]
    await pool.aclose()


async def test_aclose_cancels_in_flight_spawns_and_closes_idle_ones() -> None:
    maker = Maker()
    pool = _pool(maker, size=2)
    await pool.take("a")
    pool.replenish("a")
    await _settle()
    idle = pool.idle()
    maker.gate.clear()
    await pool.take("a")
    pool.replenish("a")  # one in flight, blocked at the gate
    await _settle()
    await pool.aclose()
    assert all(w.closed for w in idle[1:])
    assert await pool.take("a") is None
    pool.replenish("a")
    maker.gate.set()
    await _settle()
    assert len(maker.made) == 2  # the in-flight one was cancelled, nothing new started


async def test_size_zero_does_nothing() -> None:
    maker = Maker()
    pool = _pool(maker, size=0)
    assert await pool.take("a") is None
    pool.replenish("a")
    await _settle()
    assert maker.made == []
