"""Codex's ``demo()`` hook, reached as ``dsh demo`` reaches it: through the entry point."""

from __future__ import annotations

from pathlib import Path

from dsh.subagent import DemoFailure
from dsh.subagent.testing import check_demo_plan
from dsh.subagent_codex._demo import FAILURE, SERVE_ANSWER


async def test_the_plan_scripts_a_loopback_model_in_a_hermetic_home(tmp_path: Path) -> None:
    failure = DemoFailure("HTTP 503", FAILURE)
    checked = await check_demo_plan(
        "codex", tmp_path, cancel="cancel via job_kill", failure=failure
    )
    assert (checked.plan.product, checked.plan.serve_answer) == ("Codex", SERVE_ANSWER)
    assert checked.model_config["env"]["CODEX_HOME"] == str(tmp_path / "codex-home")
    assert "127.0.0.1" in (tmp_path / "codex-home" / "config.toml").read_text()
    served = checked.served_config["env"]["CODEX_HOME"]
    assert served == str(tmp_path / "served" / "codex-home")


def test_the_failure_line_is_the_one_the_demo_prints() -> None:
    # Built with failure_line(...); the printed text must stay byte-identical.
    assert FAILURE == (
        "Product subagent failure (product: Codex; stage: turn; category: httpConnectionFailed;"
        " HTTP status: 503)"
    )
