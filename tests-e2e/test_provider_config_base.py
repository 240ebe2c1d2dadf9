"""Both product configs and providers share one base each (issue 15): the same common fields,
types and checks, and the same ``from_config``, ``name`` and ``doctor()``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pydantic
import pytest

from dsh.subagent import kit
from dsh.subagent.kit import DoctorCheck, ProviderBase, ProviderConfigBase
from dsh.subagent_claude_code import ClaudeCodeProvider, ClaudeCodeProviderConfig
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subprocess import ENV_POLICIES, MAX_GRACE_MS

CONFIGS: list[type[ProviderConfigBase]] = [CodexProviderConfig, ClaudeCodeProviderConfig]
SHARED = set(ProviderConfigBase.model_fields)


def test_the_seam_restates_the_spawn_layers_facts_exactly() -> None:
    assert kit.MAX_GRACE_MS == MAX_GRACE_MS
    assert get_args(kit.EnvPolicy) == ENV_POLICIES


@pytest.mark.parametrize("config", CONFIGS)
def test_each_config_builds_on_the_base(config: type[ProviderConfigBase]) -> None:
    assert issubclass(config, ProviderConfigBase)
    assert set(config.model_fields) >= SHARED
    assert config.model_config.get("frozen") is True
    assert config.model_config.get("extra") == "forbid"


@pytest.mark.parametrize("config", CONFIGS)
def test_name_lists_are_tuples_in_both(config: type[ProviderConfigBase]) -> None:
    built = config.model_validate(
        {"inherit_env": ["A"], "credential_env": ["B"], "tool_env": ["A"]}
    )
    assert (built.inherit_env, built.credential_env, built.tool_env) == (("A",), ("B",), ("A",))


@pytest.mark.parametrize("config", CONFIGS)
def test_the_grace_bound_is_the_spawn_layers(config: type[ProviderConfigBase]) -> None:
    assert config(dispose_grace_ms=MAX_GRACE_MS).dispose_grace_ms == MAX_GRACE_MS
    with pytest.raises(pydantic.ValidationError) as caught:
        config(dispose_grace_ms=MAX_GRACE_MS + 1)
    assert caught.value.errors()[0]["loc"] == ("dispose_grace_ms",)


def _rejections(fields: dict[str, Any], message: str) -> list[str]:
    """Each config rejects ``fields`` with one error on its field that says ``message``; the
    errors' texts."""
    seen = []
    for config in CONFIGS:
        with pytest.raises(pydantic.ValidationError) as caught:
            config.model_validate(fields)
        [error] = caught.value.errors()
        assert error["loc"] == (next(iter(fields)),)
        assert message in error["msg"]
        seen.append(error["msg"])
    return seen


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"env": {"A=B": "x"}}, "env names must be non-empty and contain no '=' or NUL"),
        ({"env": {"A": "x\0y"}}, "env values must not contain NUL"),
        ({"tool_env": [""]}, "tool_env names must be non-empty and contain no '=' or NUL"),
        ({"credential_env": ["A=B"]}, "credential_env names must be non-empty"),
        ({"env_policy": "none"}, "'scrub' or 'core'"),
        ({"nice": True}, "nice must be an integer from 0 to 19, 'auto', or null"),
        ({"nice": "high"}, "nice must be an integer from 0 to 19, 'auto', or null"),
        ({"prewarm": -1}, "greater than or equal to 0"),
        ({"prewarm": 17}, "less than or equal to 16"),
        ({"prewarm": True}, "valid integer"),
        ({"stderr": "inherit"}, "'forward' or 'discard'"),
    ],
)
def test_the_shared_checks_say_the_same_in_both(fields: dict[str, Any], message: str) -> None:
    seen = _rejections(fields, message)
    assert seen[0] == seen[1]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"provider_name": ""}, "provider_name must not be blank"),
        ({"provider_name": " \t"}, "provider_name must not be blank"),
        ({"model": ""}, "model must not be blank when set"),
        ({"model": "  "}, "model must not be blank when set"),
    ],
)
def test_the_name_and_model_checks_say_the_same_in_both(
    fields: dict[str, Any], message: str
) -> None:
    _rejections(fields, message)


PROVIDERS: list[type[ProviderBase[Any]]] = [CodexProvider, ClaudeCodeProvider]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_each_provider_builds_on_the_kits_provider_base(
    provider: type[ProviderBase[Any]], tmp_path: Path
) -> None:
    # from_config, name and doctor() are the base's; each provider only gives its data.
    assert issubclass(provider, ProviderBase)
    for hook in ("from_config", "doctor"):
        assert hook not in vars(provider), f"{provider.__name__} redefines {hook}"
    built = provider.from_config({"provider_name": "named", "model": "m"})
    assert (built.name, built.config.model) == ("named", "m")
    assert isinstance(built.config, provider.config_class)
    assert provider().name == provider.config_class.model_validate({}).provider_name
    with pytest.raises(pydantic.ValidationError):
        provider.from_config({"unknown_field": 1})
    install = provider.install
    home = tmp_path / "home"
    config = provider.config_class.model_validate({"env": {"HOME": str(home)}})
    login = home / install.default_config_dir / install.login_file
    assert install.login_path(config, {}) == login
    moved = tmp_path / "elsewhere"
    assert install.login_path(config, {install.config_dir_env: str(moved)}) == (
        moved / install.login_file
    )
    own = provider.config_class.model_validate({"env": {install.config_dir_env: str(home)}})
    assert install.login_path(own, {install.config_dir_env: str(moved)}) == (
        home / install.login_file
    )
    rows = install.rows(config, ["A_KEY"], {})
    assert [row.check for row in rows] == [
        install.version_label,
        install.payload_label,
        "isolation",
        "credential variables",
        "login file",
    ]
    assert rows[2:] == [
        DoctorCheck("isolation", "native", True),
        DoctorCheck("credential variables", "A_KEY", True),
        DoctorCheck("login file", "absent", True),
    ]
    login.parent.mkdir(parents=True)
    login.write_text("{}")
    assert install.rows(config, [], {})[3:] == [
        DoctorCheck("credential variables", "none", True),
        DoctorCheck("login file", "exists", True),
    ]
