"""The spend caps' and the fair queue's cost per run, against none, in the same run (no product).

Run: ``uv run python tests-e2e/benchmarks/fair_queue.py [--runs N] [--rounds R] [--in-flight K]``.

A ``SubagentTool`` over a ``FakeProvider`` that answers at once runs ``--runs`` foreground
delegations, ``--in-flight`` at a time, in each of four variants that take turns over
``--rounds`` rounds (order rotating) after an unrecorded warm-up:

- ``none``: no ``max_concurrent`` (no queue: what ships by default), and a provider that reports
  no usage, so the caps have nothing to check;
- ``caps``: the same with a provider that reports usage and a tool with every token cap set
  (``max_total_tokens`` is on by default; ``max_output_tokens`` too here): the caps' check of the
  facts and the spent figures carried in the host facts;
- ``free``: ``max_concurrent`` above ``--in-flight`` (every run takes its slot at once: the
  gate's fast path and the facts);
- ``full``: ``max_concurrent = 1`` (every run but one waits in the queue: the waiter, its place,
  the hand-over), with the ``--in-flight`` callers spread over 3 owners.

The figure is the process CPU (``time.process_time``) per run, each variant's median over the
rounds, and the difference to ``none``. Printed, never asserted (the machine is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from dsh.jobs import JobRegistry
from dsh.subagent import SubagentService, UsageFacts
from dsh.subagent.testing import FakeProvider
from dsh.tool_subagent import Caller, SubagentTool, SubagentToolConfig

#: Per variant: ``max_concurrent``, and whether the provider reports usage (and the tool sets
#: every token cap).
VARIANTS = {
    "none": (None, False),
    "caps": (None, True),
    "free": (1_000_000, False),
    "full": (1, False),
}
USAGE = UsageFacts(input_tokens=1000, output_tokens=100, total_tokens=1100, model_requests=1)


def _tool(name: str, limit: int | None, capped: bool) -> SubagentTool:
    service = SubagentService()
    service.register(FakeProvider(name, delay=0.0, usage=USAGE if capped else None))
    caps = {"max_output_tokens": 1_000_000} if capped else {}
    config = SubagentToolConfig(provider=name, max_depth="provider-managed", **caps)
    return SubagentTool(config, service, JobRegistry(), max_concurrent=limit)


async def _round(tool: SubagentTool, runs: int, in_flight: int) -> float:
    callers = [Caller(session_id=f"owner-{n % 3}", cwd="/tmp") for n in range(in_flight)]
    arguments = {"description": "d", "prompt": "p"}
    left = runs

    async def worker(caller: Caller) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            result = await tool.call(arguments, caller)
            assert not result.is_error, result.text

    began = time.process_time()
    await asyncio.gather(*(worker(caller) for caller in callers))
    return (time.process_time() - began) / runs


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--in-flight", type=int, default=8)
    args = parser.parse_args()
    tools = {
        variant: _tool(f"bench-{variant}", limit, capped)
        for variant, (limit, capped) in VARIANTS.items()
    }
    names = list(tools)
    for variant in names:  # warm-up, not recorded
        await _round(tools[variant], args.runs // 4, args.in_flight)
    figures: dict[str, list[float]] = {variant: [] for variant in names}
    for n in range(args.rounds):
        order = names[n % len(names) :] + names[: n % len(names)]
        for variant in order:
            figures[variant].append(await _round(tools[variant], args.runs, args.in_flight))
    base = statistics.median(figures["none"])
    print(f"{args.runs} runs x {args.rounds} rounds, {args.in_flight} in flight, CPU per run:")
    for variant in names:
        median = statistics.median(figures[variant])
        delta = (median - base) * 1e6
        print(f"  {variant:5} {median * 1e6:8.1f} us   ({delta:+.1f} us against none)")


if __name__ == "__main__":
    asyncio.run(main())
