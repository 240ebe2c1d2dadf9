"""``dsh run`` after an authentication failure: a stderr hint naming unforwarded credentials."""

from __future__ import annotations

import os
from typing import Any

import pytest

from dsh.subagent.kit import FailureFacts
from dsh.subagent.testing import FakeProvider
from dsh.subprocess import is_credential_env
from dsh.tool_subagent import _harness as harness_module
from dsh.tool_subagent._auth_hint import auth_hint

HINT = (
    'dsh run: hint: OPENAI_API_KEY set in this environment but not passed to provider "fake"; '
    "to forward one, list it in that provider's inherit_env in the profile"
)


def _load(kind: str, config: Any = None) -> FakeProvider:
    category = dict(config or {})["outcome"]
    return FakeProvider("fake", failure=FailureFacts("Codex", "turn", category))


@pytest.fixture
def only_one_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness_module, "load_provider", _load)
    for name in list(os.environ):
        if is_credential_env(name):
            monkeypatch.delenv(name)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-value-never-shown")


@pytest.mark.usefixtures("only_one_key")
@pytest.mark.parametrize("background", [False, True])
async def test_an_authentication_failure_names_the_unforwarded_key(
    background: bool, run_fake: Any
) -> None:
    rc, out, err, _ = await run_fake("authentication", "task", background)
    assert rc == 1
    assert out == ""
    lines = err.strip().splitlines()
    assert lines[-1] == HINT
    assert "category: authentication" in err, "the diagnostic itself is unchanged"
    assert "sk-value-never-shown" not in err


@pytest.mark.usefixtures("only_one_key")
async def test_no_hint_for_other_failures(run_fake: Any) -> None:
    _, _, err, _ = await run_fake("internalServerError")
    assert "hint" not in err


class _Forwarding:
    name = "codex"

    @staticmethod
    def forwarded_env_names() -> tuple[str, ...]:
        return ("OPENAI_API_KEY",)


def test_no_hint_when_the_provider_forwards_every_credential() -> None:
    failure = "Product subagent failure (product: Codex; stage: turn; category: authentication)"
    environ = {"OPENAI_API_KEY": "k", "PATH": "/bin", "DSH_FAKE_OPENAI_KEY": "k"}
    assert auth_hint(_Forwarding(), failure, environ) == ""
    environ |= {"ANTHROPIC_API_KEY": "k", "A_TOKEN": "t", "B_SECRET": "s", "C_KEY": "k"}
    assert auth_hint(_Forwarding(), failure, environ).startswith(
        "dsh run: hint: ANTHROPIC_API_KEY, A_TOKEN, B_SECRET (+1 more) set in this environment "
        'but not passed to provider "codex"'
    )
