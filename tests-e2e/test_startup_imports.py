"""The start-up paths import only what they need (docs/performance.md, "Start-up").

Each command starts in a fresh interpreter through ``startup/probe.py``, which reports
``sys.modules`` at the moment that matters: ``dsh --version`` at its end, ``dsh run`` when it
spawns (the spawn is replaced by the report: no product starts), ``dsh mcp`` once ``tools/list``
is answered (driven with raw JSON-RPC over stdio). None of the modules that
``startup/forbidden_imports.toml`` lists for that path may be there. Timings are not asserted
here (the machine is shared): the benchmark's start-up mode measures them.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

_HERE = Path(__file__).resolve().parent / "startup"
FORBIDDEN = tomllib.loads((_HERE / "forbidden_imports.toml").read_text("utf-8"))


def _drive() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dsh_startup_drive", _HERE / "drive.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


drive = _drive()
start_up = drive.start_up


def _forbidden(path: str) -> list[str]:
    return [*FORBIDDEN["common"]["modules"], *FORBIDDEN[path]["modules"]]


def _env(home: Path) -> dict[str, str]:
    """A hermetic environment: fake keys (nothing is called), private homes, bytecode caches on
    (as an installed dsh has them)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key in ("PATH", "LANG", "LC_ALL", "TMPDIR", "VIRTUAL_ENV")
    }
    home.mkdir(exist_ok=True)
    env.update(
        HOME=str(home),
        CODEX_HOME=str(home),
        XDG_STATE_HOME=str(home / "state"),
        OPENAI_API_KEY="sk-fake-startup-probe",
        ANTHROPIC_API_KEY="sk-ant-fake-startup-probe",
    )
    return env


def _assert_clean(started: Any, path: str) -> None:
    found = {name: started.imported(name) for name in _forbidden(path)}
    assert {name: mods[:5] for name, mods in found.items() if mods} == {}


@pytest.mark.timeout(120)
def test_dsh_version_imports_the_parser_and_the_version_only(tmp_path: Path) -> None:
    _assert_clean(start_up("version", [], env=_env(tmp_path / "home")), "version")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["codex", "claude_code"])
def test_dsh_run_imports_no_more_than_its_product_needs_before_the_spawn(
    tmp_path: Path, kind: str
) -> None:
    args = ["--tool", f"subagent_{kind}", "--cwd", str(tmp_path), "Say hello."]
    _assert_clean(start_up("run", args, env=_env(tmp_path / "home")), f"run_{kind}")


@pytest.mark.timeout(120)
def test_dsh_mcp_imports_only_the_tools_and_the_server_before_tools_list(tmp_path: Path) -> None:
    profile = tmp_path / "codex.toml"
    profile.write_text('[[provider]]\nkind = "codex"\n', encoding="utf-8")
    args = ["--profile", str(profile), "--cwd", str(tmp_path)]
    started = start_up("mcp", args, env=_env(tmp_path / "home"))
    assert [tool["name"] for tool in started.tools][:1] == ["subagent_codex"]
    _assert_clean(started, "mcp")
