"""Claude Code's ``demo()`` hook, reached as ``dsh demo`` reaches it: through the entry point."""

from __future__ import annotations

from pathlib import Path

from dsh.subagent import DemoFailure
from dsh.subagent.testing import check_demo_plan
from dsh.subagent_claude_code._demo import FAILURE, SERVE_ANSWER


async def test_the_plan_scripts_a_loopback_model_in_a_hermetic_home(tmp_path: Path) -> None:
    failure = DemoFailure("HTTP 401", FAILURE)
    checked = await check_demo_plan(
        "claude-code", tmp_path, cancel="cancel the tool call", failure=failure
    )
    assert (checked.plan.product, checked.plan.serve_answer) == ("Claude Code", SERVE_ANSWER)
    env = checked.model_config["env"]
    assert env["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")
    assert env["HOME"].startswith(str(tmp_path / "claude"))
    assert checked.served_config["env"]["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")


def test_the_failure_line_is_the_one_the_demo_prints() -> None:
    # Built with failure_line(...); the printed text must stay byte-identical.
    assert FAILURE == (
        "Product subagent failure (product: Claude Code; stage: query-run;"
        " category: authentication; HTTP status: 401; exit code: 1)"
    )
