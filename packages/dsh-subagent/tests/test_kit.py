"""``dsh.subagent.kit``: the provider-author door, and the config base both products share."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import ClassVar

import pydantic
import pytest

import dsh.subagent
import dsh.subagent.kit as kit
from dsh.subagent.kit import MAX_GRACE_MS

# That kit's __all__ is sorted, complete and resolves is tests-e2e/test_public_api.py's check,
# made for every public module of the six packages.


def test_a_name_on_both_surfaces_is_one_object() -> None:
    # The names the root still offers beside the kit (a harness catches what a provider raises)
    # are the same objects; the root's deprecated names are checked in test_surfaces.py.
    shared = set(kit.__all__) & set(dsh.subagent.__all__)
    assert shared
    for name in shared:
        assert getattr(kit, name) is getattr(dsh.subagent, name), name


def test_the_seam_does_not_import_the_spawn_layer() -> None:
    # dsh-subagent requires only pydantic (tests-e2e/test_wheels.py), so no module may import
    # dsh.subprocess; the config base restates its two facts (checked in tests-e2e).
    importing = set()
    for path in Path(dsh.subagent.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "dsh.subprocess"
            ):
                importing.add(path.name)
    assert importing == set()


class _Config(kit.ProviderConfigBase):
    extra_field: bool = True


def test_defaults() -> None:
    config = _Config()
    assert (config.env, config.inherit_env, config.credential_env, config.tool_env) == (
        {},
        (),
        (),
        (),
    )
    assert config.env_policy == "scrub"
    assert config.dispose_grace_ms == 3000
    assert config.stderr == "forward"
    assert config.nice == "auto"
    assert config.prewarm == 0


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"dispose_grace_ms": 0}, "dispose_grace_ms"),
        ({"dispose_grace_ms": MAX_GRACE_MS + 1}, "dispose_grace_ms"),
        ({"nice": 20}, "nice"),
        ({"nice": True}, "nice"),
        ({"nice": "high"}, "nice"),
        ({"prewarm": -1}, "prewarm"),
        ({"prewarm": kit.MAX_PREWARM + 1}, "prewarm"),
        ({"prewarm": True}, "prewarm"),
        ({"prewarm": "2"}, "prewarm"),
        ({"prewarm": 1.5}, "prewarm"),
        ({"env": {"A=B": "x"}}, "env"),
        ({"inherit_env": [""]}, "inherit_env"),
        ({"unknown": 1}, "unknown"),
        ({"isolation": "shared"}, "isolation"),
        ({"isolation": "private", "home_template": "relative/dir"}, "home_template"),
        ({"isolation": "private", "home_template": " "}, "home_template"),
        ({"isolation": "private", "home_template": "/no/such/dsh/template"}, "home_template"),
        ({"limits": {"memory": "lots"}}, ("limits", "memory")),
        ({"limits": {"memory": "1M"}}, ("limits", "memory")),
        ({"limits": {"memory": True}}, ("limits", "memory")),
        ({"limits": {"tasks": 0}}, ("limits", "tasks")),
        ({"limits": {"tasks": "512"}}, ("limits", "tasks")),
        ({"limits": {"cpu": 0}}, ("limits", "cpu")),
        ({"limits": {"swap": 1}}, ("limits", "swap")),
    ],
)
def test_the_shared_checks_name_the_field(
    fields: dict[str, object], field: str | tuple[str, ...]
) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        _Config.model_validate(fields)
    assert caught.value.errors()[0]["loc"] == (field if isinstance(field, tuple) else (field,))


@pytest.mark.parametrize(
    ("memory", "size"),
    [
        ("4G", 4 << 30),
        ("512M", 512 << 20),
        ("512MiB", 512 << 20),
        ("1.5g", 3 << 29),
        (8 << 20, 8 << 20),
    ],
)
def test_limits_take_sizes_with_binary_units(memory: object, size: int) -> None:
    config = _Config.model_validate({"limits": {"memory": memory, "tasks": 512, "cpu": 1.5}})
    assert config.limits is not None
    assert (config.limits.memory, config.limits.tasks, config.limits.cpu) == (size, 512, 1.5)
    assert config.limits_best_effort is False


class _Homed(kit.ProviderConfigBase):
    private_home_env: ClassVar[tuple[str, ...]] = ("PRODUCT_HOME", "HOME")


def test_isolation_defaults_to_native_and_private_takes_an_existing_template(
    tmp_path: Path,
) -> None:
    assert _Config().isolation == "native"
    assert _Config().home_template is None
    config = _Homed(isolation="private", home_template=str(tmp_path))
    assert (config.isolation, config.home_template) == ("private", str(tmp_path))
    # Native leaves the product's own names alone: the deployment points them where it likes.
    assert _Homed(env={"HOME": "/h", "PRODUCT_HOME": "/p"}).isolation == "native"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"home_template": "/"}, 'home_template needs isolation = "private"'),
        ({"isolation": "private", "env": {"HOME": "/h"}}, "env must not set HOME"),
        (
            {"isolation": "private", "inherit_env": ["PRODUCT_HOME", "X"]},
            "inherit_env must not set PRODUCT_HOME",
        ),
    ],
)
def test_private_isolation_checks_name_the_field(fields: dict[str, object], message: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=re.escape(message)):
        _Homed.model_validate(fields)


def test_frozen() -> None:
    with pytest.raises(pydantic.ValidationError):
        _Config().nice = 3  # type: ignore[misc]
