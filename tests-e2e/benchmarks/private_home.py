"""The cost of ``isolation = "private"`` per run (issue 24): native and private, alternating.

For each product, one provider per mode runs one delegation at a time against a loopback model
server in this process, the two modes alternating (native, private, private, native, ...) so
they see the same machine. *end-to-end* is ``start()`` to the answer in hand and ``aclose()``
returned (whole-tree exit and, under ``private``, the private home removed). Beside it: the
private home's creation alone (the dir, its subdirs and the template copy, as a run makes it;
for Claude Code next to the run dir a native run makes anyway), and the private home's size on
disk at the answer (what the product wrote into it), from three more, untimed, private runs.

    uv run python tests-e2e/benchmarks/private_home.py [--pairs N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from dsh.subagent_claude_code import ClaudeCodeProvider, ClaudeCodeProviderConfig
from dsh.subagent_claude_code._env import make_run_dir
from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_claude_code.testing import hermetic_env as claude_hermetic_env
from dsh.subagent_claude_code.testing import make_start_request as claude_request
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subagent_codex._run_dirs import _make as make_codex_private_dir
from dsh.subagent_codex.testing import (
    FakeResponsesServer,
    hermetic_env,
    make_start_request,
    write_codex_home,
)

PRIVATE_NAMES = ("HOME", "CODEX_HOME", "CODEX_SQLITE_HOME", "CLAUDE_CONFIG_DIR")
BASE = {"stderr": "discard", "dispose_grace_ms": 2000}


@dataclass
class Setup:
    native: Any
    private: Any
    request: Any
    queue: Callable[[], None]
    make_private: Callable[[], str]
    make_native: Callable[[], str] | None


C = TypeVar("C", CodexProviderConfig, ClaudeCodeProviderConfig)


def _without_homes(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in PRIVATE_NAMES}


def _native_and_private(config: type[C], native_env: dict[str, str], template: Path) -> tuple[C, C]:
    """The benchmark's config of a native run (its own homes in ``native_env``) and of a private
    run (a fresh home from ``template`` per run)."""
    private = {
        "env": _without_homes(native_env),
        "isolation": "private",
        "home_template": str(template),
    }
    return (
        config.model_validate({**BASE, "env": native_env}),
        config.model_validate({**BASE, **private}),
    )


def codex_setup(server: FakeResponsesServer, tmp: Path, ws: Path) -> Setup:
    template = write_codex_home(tmp / "codex-template", server.base_url, "mock-model")
    native_env = hermetic_env(write_codex_home(tmp / "codex-native", server.base_url, "mock-model"))
    native, private = _native_and_private(CodexProviderConfig, native_env, template)

    def queue() -> None:
        server.queue_text("OK", phase="final_answer")

    return Setup(
        CodexProvider(native),
        CodexProvider(private),
        make_start_request(ws, "hello"),
        queue,
        lambda: make_codex_private_dir(private),
        None,
    )


def claude_setup(server: FakeMessagesServer, tmp: Path, ws: Path) -> Setup:
    native_env = claude_hermetic_env(tmp / "claude-native", server.base_url)
    template = tmp / "claude-template"
    template.mkdir()
    (template / "settings.json").write_text("{}")
    native, private = _native_and_private(ClaudeCodeProviderConfig, native_env, template)

    def queue() -> None:
        server.queue_text("OK")

    return Setup(
        ClaudeCodeProvider(native),
        ClaudeCodeProvider(private),
        claude_request(ws, "hello"),
        queue,
        lambda: make_run_dir(private)[0],
        lambda: make_run_dir(native)[0],
    )


def _size_kb(path: Path) -> float:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += (Path(dirpath) / name).lstat().st_size
            except OSError:
                continue
    return total / 1e3


def _ms(samples: list[float]) -> str:
    q = statistics.quantiles(samples, n=10)
    median = statistics.median(samples)
    return f"{median * 1000:.1f} ms [p10 {q[0] * 1000:.1f}, p90 {q[-1] * 1000:.1f}]"


async def _one(provider: Any, setup: Setup) -> float:
    """One delegation to the answer and whole-tree exit; returns its seconds."""
    setup.queue()
    began = time.perf_counter()
    async with await provider.start(setup.request) as run:
        result = await run.result()
    took = time.perf_counter() - began
    assert result.stop_reason.value == "completed", result.diagnostic
    return took


def _own_private_dirs() -> list[Path]:
    tmp = Path(tempfile.gettempdir())
    return [p for tag in ("codex", "claude") for p in tmp.glob(f"dsh-{tag}-{os.getpid()}-*")]


async def _private_size_kb(setup: Setup) -> float:
    """One private delegation (not timed); the size (kB) of its private dir at the answer."""
    setup.queue()
    async with await setup.private.start(setup.request) as run:
        await run.result()
        dirs = await asyncio.to_thread(_own_private_dirs)
        return sum([await asyncio.to_thread(_size_kb, d) for d in dirs])


def _make_times(make: Callable[[], str], count: int = 20) -> list[float]:
    times = []
    for _ in range(count):
        began = time.perf_counter()
        path = make()
        times.append(time.perf_counter() - began)
        shutil.rmtree(path)
    return times


async def _measure(name: str, setup: Setup, pairs: int) -> None:
    for provider in (setup.native, setup.private):  # warm-up, not recorded
        await _one(provider, setup)
    times: dict[str, list[float]] = {"native": [], "private": []}
    for i in range(pairs):
        order = [("native", setup.native), ("private", setup.private)]
        for mode, provider in order if i % 2 == 0 else order[::-1]:
            times[mode].append(await _one(provider, setup))
    sizes = [await _private_size_kb(setup) for _ in range(3)]
    made = await asyncio.to_thread(_make_times, setup.make_private)
    paired = list(zip(times["private"], times["native"], strict=True))
    difference = statistics.median(p - n for p, n in paired) * 1000
    ratio = statistics.median(p / n for p, n in paired)
    print(f"  {name}: end-to-end native  {_ms(times['native'])}")
    print(f"  {name}: end-to-end private {_ms(times['private'])}")
    print(
        f"  {name}: private - native: median paired difference {difference:.1f} ms, "
        f"median paired ratio {ratio:.3f}x ({pairs} pairs)"
    )
    print(f"  {name}: private home creation alone {_ms(made)}")
    if setup.make_native is not None:
        native_made = await asyncio.to_thread(_make_times, setup.make_native)
        print(f"  {name}: the run dir a native run makes anyway {_ms(native_made)}")
    print(f"  {name}: private home size at the answer, median {statistics.median(sizes):.0f} kB")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=15)
    args = parser.parse_args()
    load = [round(x, 2) for x in os.getloadavg()]
    print(f"private home per run — {time.strftime('%Y-%m-%dT%H:%M:%S%z')}, load {load}")
    with tempfile.TemporaryDirectory(prefix="bench-private-") as name:
        tmp = Path(name)
        (tmp / "ws").mkdir()
        async with FakeResponsesServer() as codex_server:
            await _measure("codex", codex_setup(codex_server, tmp, tmp / "ws"), args.pairs)
        async with FakeMessagesServer() as claude_server:
            setup = claude_setup(claude_server, tmp, tmp / "ws")
            await _measure("claude-code", setup, args.pairs)
    print(f"  load after {[round(x, 2) for x in os.getloadavg()]}")


if __name__ == "__main__":
    asyncio.run(main())
