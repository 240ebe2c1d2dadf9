"""Entry-point discovery and load_provider."""

from __future__ import annotations

import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pydantic
import pytest

import dsh.subagent._discovery as discovery
from dsh.subagent import (
    NO_START_CAPABILITIES,
    PROVIDER_ENTRY_POINT_GROUP,
    SubagentError,
    installed_provider_kinds,
    load_provider,
)
from dsh.subagent._installed import declared_entries
from dsh.subagent.testing import FakeProvider, write_distribution

# The caller's table of install requirements (the tool layer passes its extras the same way).
TOOL_EXTRAS = {"codex": "dsh-tool-subagent[codex]", "claude-code": "dsh-tool-subagent[claude-code]"}


class _Config(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")
    provider_name: str = pydantic.Field(default="plug", min_length=1)
    mode: Literal["a", "b"] = "a"


class PluginProvider(FakeProvider):
    @classmethod
    def from_config(cls, mapping: Mapping[str, Any]) -> PluginProvider:
        config = _Config.model_validate(mapping)
        return cls(config.provider_name, capabilities=NO_START_CAPABILITIES)


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    module = types.ModuleType("dsh_test_plugin_good")
    module.PluginProvider = PluginProvider  # type: ignore[attr-defined]
    module.NotAProvider = object  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "dsh_test_plugin_good", module)
    first, second = tmp_path / "first", tmp_path / "second"
    write_distribution(
        first,
        "dsh_test_plugin_good",
        entry_points=f"[{PROVIDER_ENTRY_POINT_GROUP}]\n"
        "good = dsh_test_plugin_good:PluginProvider\n"
        "codex = dsh_test_plugin_missing_module:CodexProvider\n"
        "odd = dsh_test_plugin_good:NotAProvider\n",
    )
    write_distribution(
        second,
        "dsh_test_plugin_later",
        entry_points=f"[{PROVIDER_ENTRY_POINT_GROUP}]\n"
        "good = dsh_test_plugin_missing_module:Shadowed\n",
    )
    # Discovery reads these folders alone, with its real reader (not the machine's packages).
    paths = [str(first), str(second)]
    monkeypatch.setattr(discovery, "declared_entries", lambda group: declared_entries(group, paths))


@pytest.mark.usefixtures("plugins")
def test_kinds_listed_without_importing() -> None:
    assert installed_provider_kinds() == ("codex", "good", "odd")


@pytest.mark.usefixtures("plugins")
def test_load_good_despite_broken_neighbour() -> None:
    provider = load_provider("good", {"provider_name": "mine"})
    assert isinstance(provider, PluginProvider)
    assert provider.name == "mine"
    assert load_provider("good").name == "plug"


@pytest.mark.usefixtures("plugins")
def test_broken_plugin_is_reported() -> None:
    with pytest.raises(SubagentError) as info:
        load_provider("codex", {}, install_requirements=TOOL_EXTRAS)
    assert info.value.code == "PROVIDER_LOAD_FAILED"
    assert 'pip install --force-reinstall "dsh-tool-subagent[codex]"' in str(info.value)
    assert isinstance(info.value.__cause__, ImportError)
    assert "dsh_test_plugin_missing_module" not in str(info.value)
    with pytest.raises(SubagentError, match="from_config") as odd:
        load_provider("odd", {})
    assert odd.value.code == "PROVIDER_LOAD_FAILED"


@pytest.mark.usefixtures("plugins")
def test_unknown_kind_lists_installed_and_extra() -> None:
    with pytest.raises(SubagentError) as info:
        load_provider("claude-code", {}, install_requirements=TOOL_EXTRAS)
    message = str(info.value)
    assert info.value.code == "UNKNOWN_PROVIDER_KIND"
    assert "installed kinds: codex, good, odd" in message
    assert 'pip install "dsh-tool-subagent[claude-code]"' in message
    with pytest.raises(SubagentError, match=r"dsh-tool-subagent\[codex\]") as other:
        load_provider("nope", {}, install_requirements=TOOL_EXTRAS)
    assert other.value.code == "UNKNOWN_PROVIDER_KIND"


@pytest.mark.usefixtures("plugins")
def test_without_a_table_of_requirements_the_hints_name_no_package() -> None:
    with pytest.raises(SubagentError) as unknown:
        load_provider("claude-code", {})
    assert str(unknown.value).endswith("; install the package that provides it")
    with pytest.raises(SubagentError) as broken:
        load_provider("codex", {})
    assert str(broken.value).endswith("; reinstall the package that provides it")
    assert "dsh-tool-subagent" not in str(unknown.value) + str(broken.value)


@pytest.mark.usefixtures("plugins")
def test_invalid_config_names_field_not_value() -> None:
    with pytest.raises(SubagentError) as info:
        load_provider("good", {"mode": "SECRET-VALUE", "extra_field": 1})
    message = str(info.value)
    assert info.value.code == "INVALID_PROVIDER_CONFIG"
    assert "mode:" in message
    assert "extra_field:" in message
    assert "SECRET-VALUE" not in message
    assert isinstance(info.value.__cause__, pydantic.ValidationError)


def test_real_metadata_group_is_readable() -> None:
    kinds = installed_provider_kinds()
    assert isinstance(kinds, tuple)
    assert list(kinds) == sorted(kinds)
