from __future__ import annotations

import json
import sys

import pytest

from dsh.subprocess import (
    TREE_MARKER_ENV,
    Collect,
    SpawnSpec,
    SubprocessRuntime,
    build_child_env,
    scrubbed_parent_env,
)

AMBIENT = ["X_TOKEN", "X_PASSWORD", "X_API_KEY", "DSH_FOO", "dsh_lower", "MONKEY_X"]
DUMP = "import json, os; print(json.dumps(dict(os.environ)))"


def test_scrub_pure() -> None:
    env = dict.fromkeys(AMBIENT, "v") | {"PATH": "/bin", "CODEX_HOME": "/c", "TERM": "xterm"}
    assert scrubbed_parent_env(env) == {"PATH": "/bin", "CODEX_HOME": "/c", "TERM": "xterm"}
    merged = build_child_env({"DSH_X": "1", "PATH": None, "OPENAI_API_KEY": "k"}, environ=env)
    assert merged == {"CODEX_HOME": "/c", "TERM": "xterm", "DSH_X": "1", "OPENAI_API_KEY": "k"}


async def _child_env(runtime: SubprocessRuntime, overlay: dict[str, str | None]) -> dict[str, str]:
    proc = await runtime.spawn(
        SpawnSpec([sys.executable, "-c", DUMP], env=overlay, stdout=Collect(1 << 20))
    )
    assert (await proc.wait()).exit_code == 0
    await proc.aclose()
    result: dict[str, str] = json.loads(proc.collected("stdout").text)
    return result


async def test_ambient_secrets_never_reach_child(
    runtime: SubprocessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in AMBIENT:
        monkeypatch.setenv(name, "ambient-value")
    monkeypatch.setenv(TREE_MARKER_ENV, "1:2:inherited")
    env = await _child_env(runtime, {})
    assert not set(AMBIENT) & set(env)
    assert "PATH" in env
    assert env[TREE_MARKER_ENV] != "1:2:inherited"


async def test_explicit_overlay_reaches_child(
    runtime: SubprocessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in AMBIENT:
        monkeypatch.setenv(name, "ambient-value")
    env = await _child_env(runtime, {name: f"given-{name}" for name in AMBIENT})
    assert {name: env[name] for name in AMBIENT} == {name: f"given-{name}" for name in AMBIENT}


async def test_none_overlay_removes_name(
    runtime: SubprocessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLAIN_NAME", "x")
    assert "PLAIN_NAME" in await _child_env(runtime, {})
    assert "PLAIN_NAME" not in await _child_env(runtime, {"PLAIN_NAME": None})
