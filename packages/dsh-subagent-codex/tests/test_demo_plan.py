"""Codex's ``demo()`` hook, reached as ``dsh demo`` reaches it: through the entry point."""

from __future__ import annotations

import os
from pathlib import Path

from dsh.subagent import DemoFailure
from dsh.subagent.testing import demo_plan
from dsh.subagent_codex._demo import FAILURE, SERVE_ANSWER


async def test_the_plan_scripts_a_loopback_model_in_a_hermetic_home(tmp_path: Path) -> None:
    plan = demo_plan("codex")
    assert plan.product == "Codex"
    assert plan.scenarios == (
        "foreground answer",
        "background job",
        "model failure",
        "cancel via job_kill",
    )
    async with plan.model(tmp_path) as model:
        env = model.provider_config()["env"]
        assert env["CODEX_HOME"] == str(tmp_path / "codex-home")
        assert "127.0.0.1" in (tmp_path / "codex-home" / "config.toml").read_text()
        assert model.tasks_seen() == []
        assert model.fail("FAIL-CODEX") == DemoFailure("HTTP 503", FAILURE)
    assert plan.serve_answer == SERVE_ANSWER
    async with plan.serve(tmp_path / "served") as config:
        assert config["env"]["CODEX_HOME"] == str(tmp_path / "served" / "codex-home")
    assert list(plan.leftover_processes(os.getpid())) == []


def test_the_failure_line_is_the_one_the_demo_prints() -> None:
    # Built with failure_line(...); the printed text must stay byte-identical.
    assert FAILURE == (
        "Product subagent failure (product: Codex; stage: turn; category: httpConnectionFailed;"
        " HTTP status: 503)"
    )
