"""Config validation, entry-point loading and the pre-spawn checks (no product process needed)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pydantic
import pytest

from dsh.subagent import ProductFailure, load_provider
from dsh.subagent.kit import DoctorCheck
from dsh.subagent.testing import INVALID_BASE_FIELDS
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subagent_codex import _provider as provider_module
from dsh.subagent_codex.testing import make_start_request
from dsh.subprocess import ManagedProcess, TeardownError, marked_processes

STANDIN = Path(__file__).with_name("standin_app_server.py")
INIT_LINE = (
    "subagent-codex: Product subagent failure (product: Codex; stage: initialize; "
    "category: unknown)"
)


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        *INVALID_BASE_FIELDS,
        ({"permission_mode": "on-request"}, "permission_mode"),
        ({"stderr": "parse"}, "stderr"),
        ({"nice": "5"}, "nice"),
        ({"binary": "/usr/bin/codex"}, "binary"),
        ({"_program": ["x"]}, "_program"),
    ],
)
def test_config_rejects(fields: dict[str, Any], needle: str) -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        CodexProviderConfig.model_validate(fields)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"env": {"A=B": "x"}}, "env names must be non-empty and contain no '=' or NUL"),
        ({"env": {"A\0B": "x"}}, "env names must be non-empty and contain no '=' or NUL"),
        ({"env": {"": "x"}}, "env names must be non-empty and contain no '=' or NUL"),
        ({"env": {"A": "x\0y"}}, "env values must not contain NUL"),
        ({"inherit_env": ["A=B"]}, "inherit_env names must be non-empty and contain no '=' or NUL"),
    ],
)
def test_env_that_execve_cannot_take_is_rejected_naming_the_field(
    fields: dict[str, Any], message: str
) -> None:
    # The same rules as the Claude Code config (one shared validator in dsh.subagent): caught
    # here, not at every later spawn as an opaque initialize/unknown.
    with pytest.raises(pydantic.ValidationError) as info:
        CodexProviderConfig.model_validate(fields)
    [error] = info.value.errors()
    assert error["loc"] == (next(iter(fields)),)
    assert message in error["msg"]


def test_config_defaults_and_from_config(monkeypatch: pytest.MonkeyPatch) -> None:
    config = CodexProviderConfig()
    assert config.provider_name == "codex"
    assert config.model is None
    assert config.permission_mode == "never"
    assert config.dispose_grace_ms == 3000
    assert config.stderr == "forward"
    assert config.nice == "auto"
    monkeypatch.setenv("PATH", "")
    provider = CodexProvider.from_config({"provider_name": "codex-x", "model": "m"})
    assert provider.name == "codex-x"
    assert provider.config.model == "m"
    assert provider.inherits_parent_context is False


def test_entry_point_loading_starts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    provider = load_provider(
        "codex", {"provider_name": "codex-two", "permission_mode": "approve-for-me"}
    )
    assert isinstance(provider, CodexProvider)
    assert provider.name == "codex-two"
    assert marked_processes(owner_pid=os.getpid()) == []


async def test_pre_spawn_checks_in_order(tmp_path: Path) -> None:
    provider = CodexProvider()
    with pytest.raises(ProductFailure, match="no working directory for the child"):
        await provider.start(make_start_request(None, "task"))
    for bad in ("relative/dir", str(tmp_path / "missing")):
        with pytest.raises(ProductFailure) as info:
            await provider.start(make_start_request(bad, "task"))
        assert str(info.value) == INIT_LINE
        assert bad not in str(info.value)
    with pytest.raises(ProductFailure, match="must not be empty"):
        await provider.start(make_start_request(tmp_path, " ", "\n"))

    class Image:
        type = "image"

    request = make_start_request(tmp_path, "x")
    object.__setattr__(request, "prompt", (Image(),))
    with pytest.raises(ProductFailure, match="only text blocks"):
        await provider.start(request)


async def test_inherit_env_passes_named_ambient_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ambient")
    monkeypatch.delenv("CODEX_API_KEY", raising=False)
    provider = CodexProvider(
        CodexProviderConfig(inherit_env=("OPENAI_API_KEY", "NOT_SET_ANYWHERE"), stderr="discard"),
        _program=[sys.executable, str(STANDIN)],
    )
    argv, env = provider._argv_env()
    assert env == {"OPENAI_API_KEY": "sk-ambient"}
    assert argv[-3:] == ["app-server", "--listen", "stdio://"]


def test_real_argv_uses_the_bundled_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    import codex_cli_bin

    monkeypatch.setenv("PATH", "/usr/bin")
    argv, env = CodexProvider(CodexProviderConfig(env={"A": "1"}))._argv_env()
    assert argv == [str(codex_cli_bin.bundled_codex_path()), "app-server", "--listen", "stdio://"]
    assert env["PATH"] == f"{codex_cli_bin.bundled_path_dir()}:/usr/bin"
    assert env["A"] == "1"


async def test_cancelled_start_rolls_back_and_raises_cancelled(tmp_path: Path) -> None:
    provider = CodexProvider(
        CodexProviderConfig(env={"STANDIN_SCENARIO": "hang"}, stderr="discard"),
        _program=[sys.executable, "-c", "import time; time.sleep(30)"],
    )
    task = asyncio.create_task(provider.start(make_start_request(tmp_path, "task")))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(marked_processes, owner_pid=os.getpid()) == []


async def test_double_failure_raises_an_exception_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = ManagedProcess.aclose

    async def failing_aclose(self: ManagedProcess) -> None:
        await original(self)
        raise TeardownError("simulated")

    monkeypatch.setattr(ManagedProcess, "aclose", failing_aclose)
    provider = CodexProvider(
        CodexProviderConfig(stderr="discard"),
        _program=[sys.executable, "-c", "raise SystemExit(4)"],
    )
    with pytest.raises(ExceptionGroup) as info:
        await provider.start(make_start_request(tmp_path, "task"))
    message = str(info.value)
    assert "stage: process" in message or "stage: initialize" in message
    assert "stage: teardown" in message
    assert all(isinstance(e, ProductFailure) for e in info.value.exceptions)


def test_doctor_reports_the_pinned_binary_and_its_payload() -> None:
    assert CodexProvider().doctor()[:2] == [
        DoctorCheck("Codex version", "0.163.0", True),
        DoctorCheck("Codex payload", "present and executable", True),
    ]


@pytest.mark.parametrize("broken", ["not-executable", "missing", "unlocatable"])
def test_doctor_reports_a_broken_payload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    payload = tmp_path / "codex"
    if broken == "not-executable":
        payload.write_text("#!/bin/sh\n")
        payload.chmod(0o644)

    def locate() -> tuple[str, str | None]:
        if broken == "unlocatable":
            raise ImportError("no payload in this wheel")
        return (str(payload), None)

    monkeypatch.setattr(provider_module, "_locate", locate)
    rows = CodexProvider().doctor()
    assert rows[1] == DoctorCheck("Codex payload", "missing or not executable", False)
    assert str(tmp_path) not in repr(rows)
