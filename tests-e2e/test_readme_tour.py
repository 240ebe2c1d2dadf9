"""The README's tour runs as written: its Python block, extracted and executed as a program.

The program is the README text itself. Codex runs with its default configuration, the built-in
``openai`` provider (its ``openai_base_url`` in ``$CODEX_HOME/config.toml`` pointed at a loopback
server), authenticated by nothing but an exported ``OPENAI_API_KEY``, as the README says. A
rejected key (HTTP 401) must end the same program with ``error`` and a safe diagnostic, not a
traceback.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from dsh.subagent_codex.testing import FakeResponsesServer, HttpStatus
from dsh.subprocess.testing import run_to_exit

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]

README = Path(__file__).resolve().parent.parent / "README.md"
FAKE_KEY = "sk-readme-tour-fake-0000"


def tour_source() -> str:
    text = README.read_text(encoding="utf-8")
    tour = text[text.index("## A short tour") :]
    match = re.search(r"```python\n(.*?)```", tour, re.DOTALL)
    assert match is not None, "the README tour has no python block"
    return match.group(1)


def test_the_tour_is_a_complete_program() -> None:
    source = tour_source()
    compile(source, "README.md", "exec")
    assert "asyncio.run(main())" in source


async def _run_tour(tmp_path: Path, server: FakeResponsesServer) -> tuple[int | None, str, str]:
    script = tmp_path / "tour.py"
    script.write_text(tour_source(), encoding="utf-8")
    home = tmp_path / "codex-home"
    home.mkdir()
    config = f'model = "gpt-5"\nopenai_base_url = "{server.base_url}"\n'
    (home / "config.toml").write_text(config, encoding="utf-8")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("# A repo\n", encoding="utf-8")
    env = {
        "CODEX_HOME": str(home),
        "HOME": str(home),
        "CODEX_APP_SERVER_DISABLE_MANAGED_CONFIG": "1",
        "RUST_LOG": "error",
        "OPENAI_API_KEY": FAKE_KEY,
    }
    done = await run_to_exit([sys.executable, str(script)], cwd=repo, env=env, timeout_s=60)
    return done.exit_code, done.stdout, done.stderr


async def test_the_tour_runs_as_written(tmp_path: Path) -> None:
    async with FakeResponsesServer() as server:
        server.queue_text("README.md says hello in one line.")
        code, out, err = await _run_tour(tmp_path, server)
        requests = server.requests
    assert (code, out) == (0, "completed README.md says hello in one line.\n"), err
    assert [r.task for r in requests] == ["Summarise README.md in one line."]
    assert requests[0].headers["authorization"] == f"Bearer {FAKE_KEY}"


async def test_the_tour_with_a_rejected_key_prints_a_safe_diagnostic(tmp_path: Path) -> None:
    async with FakeResponsesServer() as server:
        server.queue(HttpStatus(401, {"error": {"message": "bad key tour-secret-9c1"}}))
        code, out, err = await _run_tour(tmp_path, server)
    assert code == 0, err
    assert out.startswith("error Product subagent failure (product: Codex; stage: turn;"), out
    assert "tour-secret-9c1" not in out + err
