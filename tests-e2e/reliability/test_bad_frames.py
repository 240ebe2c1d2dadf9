"""Bad frames: random and mutated Codex wire frames never hang or crash the provider.

Hypothesis builds a frame script from a valid exchange (handshake, turn, answer, terminal) and
mutates it: steps deleted, random or garbage frames inserted, fields replaced with random JSON,
oversized lines, invalid UTF-8, early exits. ``frame_standin.py`` plays it as the product
through the provider's stand-in seam, so the whole provider (spawn, handshake, state machine,
rollback, teardown) is exercised. The stand-in always ends its stream, so every example must
end within its bound, with no unexpected exception, with a valid outcome, and every failure is a
fixed safe line that carries no frame text (every generated string carries a canary).

The README's command plays 40 scripts; ``DSH_FULL_VOLUME=1`` plays 150 (docs/architecture.md,
"CI time").
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dsh.subagent import (
    Descriptor,
    Parent,
    ProductFailure,
    ResolvedStartRequest,
    StopReason,
    TextBlock,
)
from dsh.subagent_codex import CodexProvider, CodexProviderConfig

pytestmark = pytest.mark.timeout(240)

FULL_VOLUME = os.environ.get("DSH_FULL_VOLUME") == "1"
EXAMPLES = 150 if FULL_VOLUME else 40
CANARY = "FRAME-CANARY-5e1f"
ANSWER = f"the answer {CANARY}"
MAX_LINE = 4096
EXAMPLE_LIMIT_S = 8.0
THREAD, TURN = "thread-1", "turn-1"
METHODS = (
    "item/completed",
    "turn/completed",
    "turn/started",
    "error",
    "item/commandExecution/requestApproval",
    "item/fileChange/requestApproval",
    "item/permissions/requestApproval",
    "item/tool/requestUserInput",
    "mcpServer/elicitation/request",
    "thread/started",
    f"x/{CANARY}",
)
WORDS = (
    THREAD,
    TURN,
    "$ID",
    "completed",
    "failed",
    "interrupted",
    "final_answer",
    "commentary",
    "agentMessage",
    "commandExecution",
    "declined",
    "internalServerError",
    "contextWindowExceeded",
    "httpConnectionFailed",
    "cancel",
    "decline",
)

strings = st.one_of(
    st.sampled_from(WORDS),
    st.text(max_size=12).map(lambda t: f"{t}{CANARY}"),
    st.just(CANARY),
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), strings)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(strings, inner, max_size=3)
    ),
    max_leaves=8,
)


def note(method: str, params: Any) -> list[Any]:
    return ["send", {"method": method, "params": params, "emittedAtMs": 1}]


def skeleton() -> list[list[Any]]:
    message = {"type": "agentMessage", "id": "m", "text": ANSWER, "phase": "final_answer"}
    turn: dict[str, Any] = {"id": TURN, "items": [], "status": "completed", "error": None}
    return [
        ["expect", "initialize"],
        ["reply", {"id": "$ID", "result": {"userAgent": f"ua {CANARY}"}}],
        ["expect", "thread/start"],
        ["reply", {"id": "$ID", "result": {"thread": {"id": THREAD, "ephemeral": True}}}],
        ["expect", "turn/start"],
        ["reply", {"id": "$ID", "result": {"turn": {"id": TURN, "status": "inProgress"}}}],
        note("item/completed", {"threadId": THREAD, "turnId": TURN, "item": message}),
        note("turn/completed", {"threadId": THREAD, "turn": turn}),
    ]


random_frames = st.one_of(
    st.builds(
        lambda method, params, rid: ["send", {"method": method, "params": params, **rid}],
        st.sampled_from(METHODS),
        st.dictionaries(
            st.sampled_from(("threadId", "turnId", "turn", "item", "availableDecisions", "x")),
            json_values,
            max_size=4,
        ).map(lambda p: {"threadId": THREAD, **p}),
        st.one_of(st.just({}), st.builds(lambda i: {"id": i}, st.one_of(st.integers(), strings))),
    ),
    st.builds(lambda value: ["send", value], json_values),
    st.builds(lambda value: ["reply", {"id": "$ID", "result": value}], json_values),
    st.builds(lambda value: ["reply", {"id": "$ID", "error": value}], json_values),
    st.builds(lambda text: ["raw", text], st.text(max_size=40).map(lambda t: f"{t}{CANARY}")),
    st.builds(lambda data: ["bytes", (data + CANARY.encode()).hex()], st.binary(max_size=40)),
    st.just(["raw", CANARY * (MAX_LINE // len(CANARY) + 2)]),
    st.builds(lambda code: ["exit", code], st.integers(0, 255)),
)


def mutate_value(value: Any, path: list[Any], new: Any) -> Any:
    if not path:
        return new
    key, rest = path[0], path[1:]
    if isinstance(value, dict) and value:
        keys = sorted(value, key=str)
        chosen = keys[key % len(keys)]
        return {**value, chosen: mutate_value(value[chosen], rest, new)}
    if isinstance(value, list) and value:
        index = key % len(value)
        return [*value[:index], mutate_value(value[index], rest, new), *value[index + 1 :]]
    return new


@st.composite
def scripts(draw: st.DrawFn) -> list[list[Any]]:
    script = skeleton()
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(("delete", "insert", "mutate", "truncate")))
        # Half of the mutations hit the turn (after the handshake), half anywhere.
        last = max(0, len(script) - 1)
        position = draw(st.integers(0, last) | st.integers(min(5, last), last))
        if action == "delete" and script:
            del script[position]
        elif action == "insert":
            script.insert(position, draw(random_frames))
        elif action == "mutate" and script and script[position][0] in ("send", "reply"):
            path = draw(st.lists(st.integers(0, 7), min_size=1, max_size=4))
            kind, frame = script[position]
            script[position] = [kind, mutate_value(frame, path, draw(json_values))]
        elif action == "truncate":
            del script[position:]
    return script


def is_safe_diagnostic(text: str | None) -> bool:
    if not text or CANARY in text:
        return False
    first, *rest = text.split("\n")
    line = first.startswith("Product subagent failure (product: Codex; stage: ")
    notes = all(
        r == "Codex completed without a final answer"
        or r.startswith("Codex unattended decision (mode: never; request: ")
        for r in rest
    )
    return line and notes and len(rest) <= 2


async def play(script: list[list[Any]], workspace: Path, script_file: Path) -> str:
    await asyncio.to_thread(script_file.write_text, json.dumps(script), encoding="utf-8")
    standin = str(Path(__file__).with_name("frame_standin.py"))
    provider = CodexProvider(
        CodexProviderConfig(
            env={"BAD_FRAMES_SCRIPT": str(script_file)},
            stderr="discard",
            dispose_grace_ms=500,
        ),
        _program=[sys.executable, "-I", "-S", standin],
        _max_line_bytes=MAX_LINE,
    )
    request = ResolvedStartRequest(
        prompt=(TextBlock("task"),),
        parent=Parent(session_id="bad-frames", cwd=str(workspace)),
        descriptor=Descriptor(provider="codex"),
    )
    failure: BaseException | None = None
    try:
        run = await provider.start(request)
    except (ProductFailure, ExceptionGroup) as error:
        failure = error
    if failure is not None:
        message = str(failure)
        assert CANARY not in message, message
        assert CANARY not in repr(failure), message
        assert message.startswith("subagent-codex: Product subagent failure (product: Codex; ")
        return "start-failed"
    try:
        result = await run.result()
    finally:
        await run.aclose()
    assert result.stop_reason in (StopReason.COMPLETED, StopReason.ERROR, StopReason.MAX_TOKENS)
    if result.stop_reason is StopReason.COMPLETED:
        assert result.text == ANSWER or CANARY in result.text, result
        assert result.diagnostic is None
        return "completed"
    assert is_safe_diagnostic(result.diagnostic), result.diagnostic
    # Any failure keeps an answer Codex completed before it as partial output (product output,
    # like a success's text), and nothing else.
    assert result.output == () or result.text == ANSWER or CANARY in result.text, result
    return str(result.stop_reason)


def test_codex_wire_survives_random_and_mutated_frames(kit: Any, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    seen: dict[str, int] = {}
    slowest = [0.0]
    began = time.monotonic()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        # No shrinking: a hanging example costs its whole bound on every replay. The failing
        # script is printed as drawn.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(scripts())
    def example(script: list[list[Any]]) -> None:
        started = time.monotonic()
        outcome = asyncio.run(
            asyncio.wait_for(play(script, workspace, tmp_path / "script.json"), EXAMPLE_LIMIT_S)
        )
        seen[outcome] = seen.get(outcome, 0) + 1
        slowest[0] = max(slowest[0], time.monotonic() - started)

    example()
    took = time.monotonic() - began
    print(f"bad frames: {seen} in {took:.1f}s (slowest example {slowest[0]:.2f}s)")
    assert sum(seen.values()) >= EXAMPLES * 2 // 3
    assert kit.own_marked() == []


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param("x" * (MAX_LINE + 100), id="over-cap-line"),
        pytest.param(
            json.dumps(
                {"id": 7, "method": "item/tool/requestUserInput", "params": {"threadId": "t"}}
            ),
            id="foreign-server-request",
        ),
    ],
)
async def test_a_failure_right_after_thread_start_still_settles(tmp_path: Path, tail: str) -> None:
    # Found by the property above: the thread/start reply and a bad frame arrive in one read, so
    # the reader fails the run before the provider publishes it. The run must still settle.
    reply = {"id": "dsh-2", "result": {"thread": {"id": THREAD, "ephemeral": True}}}
    script: list[list[Any]] = [
        ["expect", "initialize"],
        ["reply", {"id": "$ID", "result": {}}],
        ["expect", "thread/start"],
        ["raw", json.dumps(reply) + "\n" + tail],
        ["expect", "turn/start"],
    ]
    outcome = await asyncio.wait_for(play(script, tmp_path, tmp_path / "script.json"), 10)
    assert outcome in ("start-failed", "error")
