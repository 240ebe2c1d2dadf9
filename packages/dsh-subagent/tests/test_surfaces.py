"""One surface per audience: the harness imports the root, provider authors import the kit.

The root keeps the provider-author names that left it importable with a ``DeprecationWarning``;
the repo itself must import none of them from the root (an AST scan of every ``.py`` file).
"""

import ast
import importlib
import os
import warnings
from pathlib import Path

import pytest

import dsh.subagent
from dsh.subagent import kit

_REPO = Path(__file__).resolve().parents[3]
_MOVED = sorted(set(kit.__all__) - set(dsh.subagent.__all__))
_SKIP_DIRS = {"node_modules", "build", "dist"}
"""Besides every dot-dir: ``.git``, ``.venv``, and CI's ``.ci-venvs`` (a dozen installed copies)."""


def _repo_sources() -> list[Path]:
    """Every ``.py`` file of the repo's own tree; installed environments are not walked."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(_REPO):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS]
        found += [Path(folder, name) for name in files if name.endswith(".py")]
    return found


def test_moved_names_are_the_kit_names_the_root_no_longer_lists() -> None:
    assert "ProviderBase" in _MOVED
    assert set(_MOVED) <= dsh.subagent._MOVED_TO_KIT | set(kit.__all__)
    assert not dsh.subagent._MOVED_TO_KIT & set(dsh.subagent.__all__)
    assert set(kit.__all__) >= dsh.subagent._MOVED_TO_KIT


@pytest.mark.parametrize("name", sorted(dsh.subagent._MOVED_TO_KIT))
def test_moved_name_still_imports_from_the_root_with_a_warning(name: str) -> None:
    root = importlib.import_module("dsh.subagent")
    with pytest.warns(DeprecationWarning, match=rf"from dsh\.subagent\.kit import {name}\b"):
        value = getattr(root, name)
    assert value is getattr(kit, name)
    assert name not in dir(root)


@pytest.mark.parametrize("name", dsh.subagent.__all__)
def test_harness_name_imports_without_a_warning(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(dsh.subagent, name) is not None
    assert name in dir(dsh.subagent)


def test_root_all_is_sorted_unique_and_importable() -> None:
    names = dsh.subagent.__all__
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))
    assert len(set(names)) == len(names)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in names:
            getattr(dsh.subagent, name)


def test_unknown_root_name_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        dsh.subagent.no_such_name  # noqa: B018


def _root_imports_of_moved_names(path: Path, root: Path = _REPO) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "dsh.subagent" and node.level == 0:
            found += [
                f"{path.relative_to(root)}:{node.lineno}: {alias.name}"
                for alias in node.names
                if alias.name in dsh.subagent._MOVED_TO_KIT
            ]
    return found


def test_the_repo_imports_provider_author_names_from_the_kit() -> None:
    files = _repo_sources()
    assert any(p.name == "_provider.py" and "subagent_codex" in str(p) for p in files)
    offenders = [hit for path in files for hit in _root_imports_of_moved_names(path)]
    assert offenders == []


def test_the_scan_finds_a_root_import_of_a_moved_name(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f() -> None:\n    from dsh.subagent import ProviderBase, SubagentService\n"
    )
    assert _root_imports_of_moved_names(sample, tmp_path) == ["sample.py:2: ProviderBase"]
