"""Claude Code's ``demo()`` hook, reached as ``dsh demo`` reaches it: through the entry point."""

from __future__ import annotations

import os
from pathlib import Path

from dsh.subagent import DemoFailure
from dsh.subagent.testing import demo_plan
from dsh.subagent_claude_code._demo import FAILURE, SERVE_ANSWER


async def test_the_plan_scripts_a_loopback_model_in_a_hermetic_home(tmp_path: Path) -> None:
    plan = demo_plan("claude-code")
    assert plan.product == "Claude Code"
    assert plan.scenarios == (
        "foreground answer",
        "background job",
        "model failure",
        "cancel the tool call",
    )
    async with plan.model(tmp_path) as model:
        env = model.provider_config()["env"]
        assert env["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")
        assert env["HOME"].startswith(str(tmp_path / "claude"))
        assert model.tasks_seen() == []
        assert model.fail("FAIL-CLAUDE") == DemoFailure("HTTP 401", FAILURE)
    assert plan.serve_answer == SERVE_ANSWER
    async with plan.serve(tmp_path / "served") as config:
        assert config["env"]["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")
    assert list(plan.leftover_processes(os.getpid())) == []


def test_the_failure_line_is_the_one_the_demo_prints() -> None:
    # Built with failure_line(...); the printed text must stay byte-identical.
    assert FAILURE == (
        "Product subagent failure (product: Claude Code; stage: query-run;"
        " category: authentication; HTTP status: 401; exit code: 1)"
    )
