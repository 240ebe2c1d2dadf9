"""The cost of a typed answer (``output_schema``, issue 40): a delegation with a schema against
one without, for each product, in the same run.

Run: ``uv run python tests-e2e/benchmarks/output_schema.py [--quick] [--runs N] [--json OUT]``.

For each product (Codex and Claude Code, both real, against their loopback fake model servers,
in one harness with two tools per product: one declaring the schema below, one without), one
unrecorded warm-up per side, then ``--runs`` foreground delegations per side, the order
alternating (none, schema, schema, none, ...). The model answers each run in one request: with
a schema, Codex a final message of JSON and Claude Code the ``StructuredOutput`` tool call its
CLI adds; without, a final text of the same length. Per run, recorded:

- **wall time**: ``Tool.call`` from the call to the result in hand (the product process
  started and ended inside it; ``prewarm`` is off);
- **parent CPU**: ``time.process_time()`` of this process over the call (every thread of it:
  the event loop, dsh's threads; not the product's processes);
- **request bytes**: the body bytes of every model request the product sent during the run, as
  the fake server received them (with a schema, the product adds it to the request).

Each side's figure is the median over its runs; printed with the ratio schema/none and the
added milliseconds (or bytes). Separately, **dsh's own check** in-process: the schema check
(``check_output_schema``, done before a spawn) and the value check (``structured_result``: parse
the answer, validate it, compact it), the median of ``--check-rounds`` rounds of each on this
schema and value.

No timing is asserted (the machine is shared; no target is set). Every wait is bounded; the
fake model servers are stopped (their ports checked closed); a failed run or a wrong answer
makes the exit code 1. ``--quick``: Codex only, 2 runs per side, 50 check rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dsh.subagent import StopReason, SubagentResult, TextBlock, check_output_schema
from dsh.subagent._output_schema import structured_result
from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex.testing import FakeResponsesServer, write_codex_home
from dsh.subagent_codex.testing import hermetic_env as codex_env
from dsh.tool_subagent import Caller, Harness

PRODUCTS = ("codex", "claude-code")
SIDES = ("none", "schema")
FIGURES = ("wall_ms", "cpu_ms", "request_bytes")
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "failing": {"type": "array", "items": {"type": "string"}},
        "count": {"type": "integer", "minimum": 0},
        "summary": {"type": "string"},
    },
    "required": ["failing", "count", "summary"],
    "additionalProperties": False,
}
VALUE = {"failing": ["tests/test_a.py::test_one", "tests/test_b.py::test_two"], "count": 2}
VALUE = {**VALUE, "summary": "two tests fail on the parser change"}
COMPACT = json.dumps(VALUE, ensure_ascii=False, separators=(",", ":"))
PLAIN = "x" * len(COMPACT)  # the untyped answer: the same length, plain text
PROMPT = "List the failing tests."
#: Bounds of every wait.
DELEGATION_TIMEOUT_S = 180.0


def tool_name(product: str, side: str) -> str:
    return f"{side}_{product.replace('-', '_')}"


def profile(tmp: Path, codex: FakeResponsesServer, claude: FakeMessagesServer) -> Any:
    home = write_codex_home(tmp / "codex-home", codex.base_url, "bench-model")
    common: dict[str, Any] = {"stderr": "discard", "dispose_grace_ms": 2000}
    configs: dict[str, dict[str, Any]] = {
        "codex": {**common, "env": codex_env(home)},
        "claude-code": {**common, "env": claude_env(tmp / "claude", claude.base_url)},
    }
    tools: list[dict[str, Any]] = []
    for product in PRODUCTS:
        tools.append({"provider": product, "tool_name": tool_name(product, "none")})
        typed = {"provider": product, "tool_name": tool_name(product, "schema")}
        tools.append({**typed, "output_schema": SCHEMA})
    providers = [{"kind": kind, "config": config} for kind, config in configs.items()]
    return {"provider": providers, "tool": tools}


def queue_answer(
    product: str, side: str, codex: FakeResponsesServer, claude: FakeMessagesServer
) -> None:
    if product == "codex":
        codex.queue_text(COMPACT if side == "schema" else PLAIN, phase="final_answer")
    elif side == "schema":
        claude.queue_tool_call("StructuredOutput", VALUE)
    else:
        claude.queue_text(PLAIN)


def model_requests(product: str, codex: FakeResponsesServer, claude: FakeMessagesServer) -> Any:
    if product == "codex":
        return codex.requests
    return [r for r in claude.requests if r.path.endswith("/messages")]


async def one_run(
    harness: Harness,
    caller: Caller,
    product: str,
    side: str,
    codex: FakeResponsesServer,
    claude: FakeMessagesServer,
) -> dict[str, float]:
    """One delegation; its figures (raises on a wrong answer)."""
    before = len(model_requests(product, codex, claude))
    queue_answer(product, side, codex, claude)
    tool = harness.tool(tool_name(product, side))
    cpu, began = time.process_time(), time.perf_counter()
    async with asyncio.timeout(DELEGATION_TIMEOUT_S):
        result = await tool.call({"description": "bench", "prompt": PROMPT}, caller)
    wall = time.perf_counter() - began
    cpu = time.process_time() - cpu
    expected = COMPACT if side == "schema" else PLAIN
    if (result.text, result.is_error) != (expected, False):
        raise RuntimeError(f"{product} {side}: unexpected result {result.text[:300]!r}")
    sent = model_requests(product, codex, claude)[before:]
    return {
        "wall_ms": wall * 1000,
        "cpu_ms": cpu * 1000,
        "request_bytes": float(sum(len(r.raw_body) for r in sent)),
        "requests": float(len(sent)),
    }


async def delegations(products: tuple[str, ...], runs: int) -> dict[str, Any]:
    """Each product's runs, both sides alternating; the medians per side."""
    samples: dict[str, dict[str, list[dict[str, float]]]] = {
        p: {s: [] for s in SIDES} for p in products
    }
    with tempfile.TemporaryDirectory(prefix="dsh-bench-schema-") as tmp_name:
        tmp = Path(tmp_name)
        workspace = tmp / "workspace"
        workspace.mkdir()
        caller = Caller("bench-session", str(workspace))
        ports: list[int] = []
        async with FakeResponsesServer() as codex, FakeMessagesServer() as claude:
            ports = [port_of(codex.base_url), port_of(claude.base_url)]
            async with Harness.from_profile(profile(tmp, codex, claude)) as harness:
                for product in products:
                    for side in SIDES:  # the warm-up, unrecorded
                        await one_run(harness, caller, product, side, codex, claude)
                    for index in range(runs):
                        order = SIDES if index % 2 == 0 else SIDES[::-1]
                        for side in order:
                            figures = await one_run(harness, caller, product, side, codex, claude)
                            samples[product][side].append(figures)
        for port in ports:
            if port_open(port):
                raise RuntimeError(f"a fake model server's port {port} is still open")
    out: dict[str, Any] = {}
    for product in products:
        sides = {
            side: {f: statistics.median(s[f] for s in samples[product][side]) for f in FIGURES}
            for side in SIDES
        }
        none, schema = sides["none"], sides["schema"]
        out[product] = {
            **sides,
            "ratio": {f: schema[f] / none[f] if none[f] else None for f in FIGURES},
            "added": {f: schema[f] - none[f] for f in FIGURES},
            "runs": runs,
        }
    return out


def check_cost(rounds: int) -> dict[str, float]:
    """dsh's own check, in-process: the median microseconds of each step."""
    completed = SubagentResult(StopReason.COMPLETED, (TextBlock(COMPACT),))
    product = "Codex"
    schema_us: list[float] = []
    value_us: list[float] = []
    for _ in range(rounds):
        began = time.perf_counter()
        check_output_schema(SCHEMA)
        schema_us.append((time.perf_counter() - began) * 1e6)
        began = time.perf_counter()
        checked = structured_result(completed, SCHEMA, product)
        value_us.append((time.perf_counter() - began) * 1e6)
        if checked.structured_output != VALUE:
            raise RuntimeError("the value check did not give the value back")
    schema_med, value_med = statistics.median(schema_us), statistics.median(value_us)
    return {"schema_check_us": schema_med, "value_check_us": value_med}


def port_of(base_url: str) -> int:
    port = urlsplit(base_url).port
    assert port is not None
    return port


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def report(result: dict[str, Any]) -> None:
    check = result["check"]
    print(
        f"dsh's own check (median of {result['check_rounds']}): schema"
        f" {check['schema_check_us']:.0f} us, value {check['value_check_us']:.0f} us"
    )
    for product, figures in result["delegations"].items():
        print(f"{product} ({figures['runs']} runs per side, medians):")
        for name, unit in (("wall_ms", "ms"), ("cpu_ms", "ms"), ("request_bytes", "B")):
            none, schema = figures["none"][name], figures["schema"][name]
            ratio = figures["ratio"][name]
            shown = f"{ratio:.3f}" if ratio is not None else "-"
            print(
                f"  {name:<14} none {none:>10.1f}  schema {schema:>10.1f}  ratio {shown}"
                f"  added {schema - none:+.1f} {unit}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="Codex only, 2 runs per side")
    parser.add_argument("--runs", type=int, default=10, help="runs per side per product")
    parser.add_argument("--check-rounds", type=int, default=2000)
    parser.add_argument("--json", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    products = ("codex",) if args.quick else PRODUCTS
    runs = 2 if args.quick else args.runs
    rounds = 50 if args.quick else args.check_rounds
    result = {
        "check": check_cost(rounds),
        "check_rounds": rounds,
        "delegations": asyncio.run(delegations(products, runs)),
    }
    report(result)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
