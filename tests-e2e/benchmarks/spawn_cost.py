"""Per-spawn cost of dsh.subprocess: supervised in a cgroup (the kernel layer, where the machine
allows it), supervised without it (``DSH_KERNEL_LAYER=off``), and a plain ``Popen``.

Each sample is ``spawn()`` of ``/bin/true`` until it returns (the program has exec'd), the three
paths taking turns in blocks of ten so they see the same machine. The kernel layer's group is
made, and joined by the standby supervisor, before the request (off the sample); its removal
happens at close, outside the sample.
The host's memory does not enter into any: the plain path uses vfork, and the supervised paths
fork nothing in the host.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time

from dsh.subprocess import KERNEL_LAYER_ENV, SpawnSpec, SubprocessRuntime
from dsh.subprocess import _spawn as spawn_module

SAMPLES = 40
BLOCK = 10
UNRECORDED = 3


PATHS = ("kernel", "supervised", "plain")


async def _one(runtime: SubprocessRuntime, path: str) -> float:
    spawn_module._SUPERVISED = path != "plain"
    before = os.environ.pop(KERNEL_LAYER_ENV, None)
    if path != "kernel":
        os.environ[KERNEL_LAYER_ENV] = "off"
    try:
        return await _timed(runtime)
    finally:
        os.environ.pop(KERNEL_LAYER_ENV, None)
        if before is not None:
            os.environ[KERNEL_LAYER_ENV] = before


async def _timed(runtime: SubprocessRuntime) -> float:
    began = time.perf_counter()
    proc = await runtime.spawn(SpawnSpec(["true"], stdout="ignore", stderr="ignore"))
    took = time.perf_counter() - began
    await proc.wait()
    await proc.aclose()
    await asyncio.sleep(0.01)  # the standby supervisor is replaced off the measured path
    return took


async def spawn_cost_ms(samples: int = SAMPLES) -> dict[str, float]:
    """Median milliseconds per spawn for each path, and the differences."""
    default = spawn_module._SUPERVISED
    times: dict[str, list[float]] = {path: [] for path in PATHS}
    try:
        async with SubprocessRuntime() as runtime:
            for _ in range(0, samples, BLOCK):
                for path in PATHS:
                    # Unrecorded first: the standbys made before a switch fit the other path
                    # (a standby sits in its group, or not, from its fork on), and the first
                    # block also starts the spawner.
                    for _ in range(UNRECORDED):
                        await _one(runtime, path)
                    for _ in range(BLOCK):
                        times[path].append(await _one(runtime, path))
    finally:
        spawn_module._SUPERVISED = default
    medians = {path: statistics.median(times[path]) * 1000 for path in PATHS}
    return {
        "kernel": round(medians["kernel"], 2),
        "supervised": round(medians["supervised"], 2),
        "plain": round(medians["plain"], 2),
        "added": round(medians["supervised"] - medians["plain"], 2),
        "kernel_added": round(medians["kernel"] - medians["supervised"], 2),
        "samples": samples,
    }
