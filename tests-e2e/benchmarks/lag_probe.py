"""The scheduling floor: event-loop lag of an idle sibling process while runs are in flight.

``run.py`` starts this next to its own measured loop. It ticks every 5 ms exactly as the
benchmark's own ticker does, but does nothing else, so its lag is what the machine imposes on any
process (2 cores shared with the products' start-up), not what dsh's loop work adds. It prints
``ready`` once ticking, and on stdin EOF prints its lag samples (seconds) as one JSON list.
Standard library only; it runs as a program, never imported.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

INTERVAL_S = 0.005
MAX_SAMPLES = 20_000  # bounded: at 200 ticks/s this is well over a minute


async def main() -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_reader(sys.stdin.fileno(), stop.set)
    samples: list[float] = []
    print("ready", flush=True)
    while not stop.is_set() and len(samples) < MAX_SAMPLES:
        began = time.perf_counter()
        await asyncio.sleep(INTERVAL_S)
        samples.append(max(0.0, time.perf_counter() - began - INTERVAL_S))
    loop.remove_reader(sys.stdin.fileno())
    print(json.dumps(samples), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
