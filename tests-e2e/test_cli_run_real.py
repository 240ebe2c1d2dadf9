"""``dsh run`` as a program, against a profile whose providers' env point at the loopback servers.

The command runs as ``sys.executable -m dsh.tool_subagent._cli`` through ``dsh.subprocess``; the
answer must be byte-exact on stdout with exit code 0, and a failure must exit 1 with the
model-visible error text on stderr. The product processes it starts must be gone when it exits.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dsh.subagent_claude_code import testing as claude_testing
from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex.testing import (
    SAMPLE_USAGE,
    SAMPLE_USAGE_FACTS,
    FakeResponsesServer,
    HttpStatus,
    Stall,
    hermetic_env,
    write_codex_home,
)
from dsh.subprocess import Collect, SpawnSpec, default_runtime
from dsh.subprocess.testing import Finished, run_to_exit
from dsh.tool_subagent._demo.scenarios import owned_marked_processes

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]

RUN_LIMIT_S = 60.0


@dataclass
class Setup:
    profile: Path
    workspace: Path
    codex: FakeResponsesServer
    claude: FakeMessagesServer


Ran = Finished


def _toml_table(name: str, values: dict[str, str]) -> str:
    lines = [f"[{name}]"] + [f"{key} = {json.dumps(value)}" for key, value in values.items()]
    return "\n".join(lines)


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    async with FakeResponsesServer() as codex, FakeMessagesServer() as claude:
        home = write_codex_home(tmp_path / "codex-home", codex.base_url, "cli-model")
        profile = tmp_path / "profile.toml"
        profile.write_text(
            "\n\n".join(
                [
                    '[[provider]]\nkind = "codex"\n[provider.config]\nstderr = "discard"',
                    _toml_table("provider.config.env", hermetic_env(home)),
                    '[[provider]]\nkind = "claude-code"\n[provider.config]\nstderr = "discard"',
                    _toml_table(
                        "provider.config.env", claude_env(tmp_path / "claude", claude.base_url)
                    ),
                ]
            )
            + "\n",
            encoding="utf-8",
        )
        yield Setup(profile, workspace, codex, claude)


async def _dsh(setup: Setup, *args: str, env: dict[str, str] | None = None) -> Ran:
    argv = [sys.executable, "-m", "dsh.tool_subagent._cli", "run", "--profile", str(setup.profile)]
    argv += ["--cwd", str(setup.workspace), *args]
    return await run_to_exit(argv, cwd=setup.workspace, env=env, timeout_s=RUN_LIMIT_S)


async def _left_by(pid: int) -> list[int]:
    return await asyncio.to_thread(owned_marked_processes, pid)


async def test_dsh_run_prints_the_codex_answer(setup: Setup) -> None:
    answer = "codex answer through dsh run  “exact” ✓"
    setup.codex.queue_text(answer)
    ran = await _dsh(setup, "Reply with the CLI-RUN answer.")
    assert (ran.exit_code, ran.stdout, ran.stderr) == (0, answer + "\n", "")
    assert [r.task for r in setup.codex.requests] == ["Reply with the CLI-RUN answer."]
    assert await _left_by(ran.pid) == []


async def test_dsh_run_background_claude_code_answer(setup: Setup) -> None:
    answer = "claude answer through dsh run --background"
    setup.claude.queue_text(answer)
    ran = await _dsh(setup, "--tool", "subagent_claude_code", "--background", "CLI-BG task")
    assert (ran.exit_code, ran.stdout) == (0, answer + "\n")  # the same ending as the foreground
    assert re.fullmatch(r"started background subagent job subagent-[0-9a-f]{12}\n", ran.stderr)
    assert [r.task for r in setup.claude.requests] == ["CLI-BG task"]
    assert await _left_by(ran.pid) == []


async def test_dsh_run_background_json_carries_the_jobs_usage_facts(setup: Setup) -> None:
    setup.codex.queue_text("bg json answer")
    setup.codex.usage = dict(SAMPLE_USAGE)
    ran = await _dsh(setup, "--background", "--json", "CLI-BG-JSON task")
    assert ran.exit_code == 0, ran.stderr
    report = json.loads(ran.stdout)
    assert (report["text"], report["stop_reason"]) == ("bg json answer", "completed")
    assert re.fullmatch(r"subagent-[0-9a-f]{12}", report["job_id"]), report["job_id"]
    # The job's host-only facts, measured where the job ran: the server's counts, and dsh's
    # stamps of every stage.
    assert {k: v for k, v in report["usage"].items() if k != "context_window"} == SAMPLE_USAGE_FACTS
    assert list(report["timings"]) == ["started_s", "first_activity_s", "answer_s", "tree_exit_s"]


@pytest.mark.parametrize(
    ("tool", "diagnostic"),
    [
        (
            "subagent_codex",
            "Product subagent failure (product: Codex; stage: turn; category: "
            "httpConnectionFailed; HTTP status: 503)",
        ),
        (
            "subagent_claude_code",
            "Product subagent failure (product: Claude Code; stage: query-run; category: "
            "authentication; HTTP status: 401; exit code: 1)",
        ),
    ],
)
async def test_dsh_run_failure_exits_1_with_the_model_visible_error(
    setup: Setup, tool: str, diagnostic: str
) -> None:
    secret = "cli-secret-error-body-77c1"
    if tool == "subagent_codex":
        setup.codex.queue(HttpStatus(503, {"error": {"message": secret}}))
    else:
        setup.claude.queue_http_error(401, secret)
    ran = await _dsh(setup, "--tool", tool, "CLI-FAIL task")
    assert (ran.exit_code, ran.stdout) == (1, "")
    assert ran.stderr == f"subagent run failed\nDiagnostic: {diagnostic}\n"
    assert secret not in ran.stderr
    assert await _left_by(ran.pid) == []


async def test_an_authentication_failure_hints_at_an_unforwarded_credential(setup: Setup) -> None:
    """The real CLI gets a 401; a gateway token was exported to dsh but not forwarded."""
    value = "gateway-token-value-5a1e"
    setup.claude.queue_http_error(401, "invalid x-api-key")
    ran = await _dsh(
        setup, "--tool", "subagent_claude_code", "CLI-AUTH task", env={"MY_GATEWAY_TOKEN": value}
    )
    assert (ran.exit_code, ran.stdout) == (1, "")
    assert ran.stderr == (
        "subagent run failed\nDiagnostic: Product subagent failure (product: Claude Code; "
        "stage: query-run; category: authentication; HTTP status: 401; exit code: 1)\n"
        "dsh run: hint: MY_GATEWAY_TOKEN set in this environment but not passed to provider "
        '"claude-code"; to forward one, list it in that provider\'s inherit_env in the profile\n'
    )
    assert value not in ran.stderr
    assert all(value.encode() not in r.raw_body for r in setup.claude.requests)


async def test_a_bare_tool_row_runs_on_each_product(setup: Setup) -> None:
    """``[[tool]] provider = "..."`` with no max_depth is a working profile (the minimal one)."""
    text = setup.profile.read_text(encoding="utf-8")
    text += '\n[[tool]]\nprovider = "codex"\n\n[[tool]]\nprovider = "claude-code"\n'
    text += 'tool_name = "claude"\n'
    setup.profile.write_text(text, encoding="utf-8")
    setup.codex.queue_text("minimal codex")
    setup.claude.queue_text("minimal claude")
    codex = await _dsh(setup, "--tool", "subagent", "minimal profile task")
    claude = await _dsh(setup, "--tool", "claude", "minimal profile task")
    assert (codex.exit_code, codex.stdout, codex.stderr) == (0, "minimal codex\n", "")
    assert (claude.exit_code, claude.stdout, claude.stderr) == (0, "minimal claude\n", "")


async def test_dsh_run_json_and_timeout(setup: Setup) -> None:
    setup.claude.queue_text("json answer")
    setup.claude.usage = dict(claude_testing.SAMPLE_USAGE)
    ran = await _dsh(setup, "--json", "--tool", "subagent_claude_code", "CLI-JSON task")
    report = json.loads(ran.stdout)
    assert (ran.exit_code, ran.stderr) == (0, "")
    # Host-only usage facts: the server's counts, with the CLI's own cost and window.
    usage = report.pop("usage")
    facts = claude_testing.SAMPLE_USAGE_FACTS
    assert {k: usage[k] for k in facts} == facts
    assert usage["cost_usd"] > 0
    assert {k: report[k] for k in ("stop_reason", "text", "diagnostic", "job_id", "exit_code")} == {
        "stop_reason": "completed",
        "text": "json answer",
        "diagnostic": None,
        "job_id": None,
        "exit_code": 0,
    }
    assert report["elapsed_s"] > 0
    setup.codex.queue(Stall((), seconds=60))
    began = time.monotonic()
    ran = await _dsh(setup, "--timeout", "3", "CLI-TIMEOUT task")
    took = time.monotonic() - began
    assert (ran.exit_code, ran.stdout) == (124, "")
    assert ran.stderr == "dsh run: cancelled after the --timeout of 3 s\n"
    assert 3 <= took < 30
    assert await _left_by(ran.pid) == []


def _no_credentials_profile(tmp_path: Path, setup: Setup, kind: str) -> Path:
    """A profile whose only provider finds no credential: its key variables blanked, no login."""
    if kind == "codex":
        home = tmp_path / "bare-codex-home"
        home.mkdir()
        # The built-in ``openai`` provider (the product default), its base URL on loopback.
        (home / "config.toml").write_text(
            f'model = "gpt-5"\nopenai_base_url = {json.dumps(setup.codex.base_url)}\n'
        )
        env = {
            "CODEX_HOME": str(home),
            "HOME": str(home),
            "OPENAI_API_KEY": "",
            "CODEX_API_KEY": "",
            "CODEX_APP_SERVER_DISABLE_MANAGED_CONFIG": "1",
        }
    else:
        env = claude_env(tmp_path / "bare-claude", setup.claude.base_url) | {
            "ANTHROPIC_API_KEY": ""
        }
    profile = tmp_path / f"bare-{kind}.toml"
    profile.write_text(
        f'[[provider]]\nkind = "{kind}"\n[provider.config]\nstderr = "discard"\n\n'
        + _toml_table("provider.config.env", env)
        + "\n",
        encoding="utf-8",
    )
    return profile


@pytest.mark.parametrize(
    ("kind", "failure", "hint"),
    [
        (
            "codex",
            # A start failure: the provider's safe line (there is no run to report on).
            "subagent-codex: Product subagent failure (product: Codex; stage: auth; category:"
            " unauthorized)",
            'provider "codex" found no credentials: set OPENAI_API_KEY or CODEX_API_KEY in the'
            " environment (forwarded by default), or log in once with `codex login`",
        ),
        (
            "claude-code",
            "subagent run failed\nDiagnostic: Product subagent failure (product: Claude Code;"
            " stage: query-run; category: authentication; exit code: 1)",
            'provider "claude-code" found no credentials: set ANTHROPIC_API_KEY or'
            " CLAUDE_CODE_OAUTH_TOKEN in the environment (forwarded by default), or log in once"
            " with `claude auth login`",
        ),
    ],
)
async def test_no_credentials_hints_how_to_log_in_and_never_a_value(
    setup: Setup, tmp_path: Path, kind: str, failure: str, hint: str
) -> None:
    canary = "sk-hint-canary-31d7"  # exported here, blanked by the profile: a value never shown
    setup.profile = _no_credentials_profile(tmp_path, setup, kind)
    ambient = {"OPENAI_API_KEY" if kind == "codex" else "ANTHROPIC_API_KEY": canary}
    began = time.monotonic()
    ran = await _dsh(setup, "CLI-NO-KEY task", env=ambient)
    elapsed = time.monotonic() - began
    assert (ran.exit_code, ran.stdout) == (1, "")
    assert ran.stderr == f"{failure}\ndsh run: hint: {hint}\n", ran.stderr
    assert canary not in ran.stderr
    assert elapsed < 10.0  # the product is not left waiting for a login that never comes
    assert await _left_by(ran.pid) == []
    if kind == "codex":
        assert setup.codex.all_requests == []

    doctor_argv = [sys.executable, "-m", "dsh.tool_subagent._cli", "doctor", "--json"]
    spec = SpawnSpec(
        argv=[*doctor_argv, "--profile", str(setup.profile)],
        env=ambient,
        stdout=Collect(1 << 16),
        stderr=Collect(1 << 16),
    )
    proc = await default_runtime().spawn(spec)
    try:
        await proc.wait()
    finally:
        await proc.aclose()
    report = proc.collected("stdout").text
    assert canary not in report
    assert canary not in proc.collected("stderr").text
    rows = [row for entry in json.loads(report)["providers"] for row in entry["checks"]]
    assert {"check": "how to log in", "value": hint, "ok": True} in rows
