"""The caller's limits on the Ray executor, with the REAL products on the local cluster.

The tool's ``stall_timeout_s`` travels with the portable job and the worker enforces it where
the run is: a stalled job ends ``failed`` with the limit's fixed text, its tree gone on every
node; a model that streams a word a second for 6 s under the same limit completes. The spend
caps travel the same way: a job in an endless tool loop ends ``failed`` at ``max_total_tokens``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from dsh.jobs import JobStatus
from dsh.tool_subagent import Harness

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(240)]

TOOLS = {"codex": "subagent_codex", "claude-code": "subagent_claude_code"}
STALLED = "subagent run stopped: no product activity for 2 s (stall_timeout_s)"
#: Limit + dispose grace (1 s in the Ray profile) + the actor's return to the driver and slack.
SETTLE_BOUND_S = 2 + 1 + 4.0
TRICKLED = "tick0 tick1 tick2 tick3 tick4 tick5 tick6"  # conftest's TRICKLE_WORDS, joined


def _harness(setup: Any) -> Harness:
    tools = [
        {
            "provider": kind,
            "tool_name": name,
            "max_depth": "provider-managed",
            "stall_timeout_s": 2,
        }
        for kind, name in TOOLS.items()
    ]
    jobs = {"executor": "ray", "max_runs_per_node": setup.runs_per_node}
    return Harness.from_profile({**setup.profile, "tool": tools, "jobs": jobs})


async def _start(harness: Harness, tool: str, prompt: str, setup: Any) -> str:
    result = await harness.tool(tool).call(
        {"description": "ray limit", "prompt": prompt, "run_in_background": True}, setup.caller
    )
    assert not result.is_error, result.text
    assert result.value is not None
    return str(result.value["job_id"])


async def _request_arrived(setup: Any, kind: str, task: str) -> float:
    deadline = time.monotonic() + 120
    while True:
        requests = setup.codex.requests if kind == "codex" else setup.claude.requests
        if any(r.task == task for r in requests):
            return time.monotonic()
        assert time.monotonic() < deadline, f"the {kind} model request never arrived"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("kind", ["codex", "claude-code"])
async def test_a_stalled_ray_job_fails_with_the_stall_limit_and_leaves_nothing(
    setup: Any, ray_kit: Any, kind: str
) -> None:
    task = f"STALL ray limit {kind}"
    async with _harness(setup) as harness:
        job_id = await _start(harness, TOOLS[kind], task, setup)
        arrived = await _request_arrived(setup, kind, task)
        assert ray_kit.cluster_marked(), "the product tree must be alive on its node"
        snapshot = await harness.jobs.wait(job_id, 60, setup.caller)
        took = time.monotonic() - arrived
        assert (snapshot.status, snapshot.detail) == (JobStatus.FAILED, STALLED), snapshot
        assert took <= SETTLE_BOUND_S, took
        assert ray_kit.where(snapshot) in {node.node_id for node in ray_kit.workers}
    ray_kit.assert_no_marked()


async def test_ray_jobs_streaming_a_word_a_second_complete_under_the_stall_limit(
    setup: Any, ray_kit: Any
) -> None:
    async with _harness(setup) as harness:
        began = time.monotonic()
        jobs = {
            kind: await _start(harness, TOOLS[kind], f"TRICKLE ray {kind}", setup) for kind in TOOLS
        }
        for kind, job_id in jobs.items():
            snapshot = await harness.jobs.wait(job_id, 120, setup.caller)
            assert snapshot.status is JobStatus.COMPLETED, (kind, snapshot.detail)
            assert harness.jobs.read(job_id, setup.caller).strip() == TRICKLED
        assert time.monotonic() - began >= 6.0
    ray_kit.assert_no_marked()


#: Each loopback model reports a fixed usage per response (Codex 2 tokens, Claude Code 15):
#: each cap is crossed by the 5th response.
CAPS = {"codex": (10, 2), "claude-code": (75, 15)}


async def test_ray_jobs_in_a_tool_loop_fail_at_their_token_cap(setup: Any, ray_kit: Any) -> None:
    tools = [
        {
            "provider": kind,
            "tool_name": name,
            "max_depth": "provider-managed",
            "max_total_tokens": CAPS[kind][0],
        }
        for kind, name in TOOLS.items()
    ]
    jobs = {"executor": "ray", "max_runs_per_node": setup.runs_per_node}
    async with Harness.from_profile({**setup.profile, "tool": tools, "jobs": jobs}) as harness:
        started = {
            kind: await _start(harness, TOOLS[kind], f"LOOP {kind}", setup) for kind in TOOLS
        }
        for kind, job_id in started.items():
            cap, step = CAPS[kind]
            snapshot = await harness.jobs.wait(job_id, 120, setup.caller)
            text = f"subagent run stopped: {cap} tokens spent (max_total_tokens)"
            assert (snapshot.status, snapshot.detail) == (JobStatus.FAILED, text), snapshot
            assert snapshot.meta is not None
            usage = snapshot.meta["usage"]
            spent = usage.get("total_tokens") or usage["input_tokens"] + usage["output_tokens"]
            assert cap <= spent <= cap + step, (kind, usage)
    ray_kit.assert_no_marked()
