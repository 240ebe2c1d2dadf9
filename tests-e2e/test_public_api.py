"""Every public module of the six packages has a sorted, complete ``__all__``; each ships py.typed.

"Complete" is read from the module's source. A package ``__init__`` only re-exports, so every
public name it binds at the top level (imports, definitions, assignments, and the names it
provides lazily: the keys of a ``_LAZY`` dict literal that its PEP 562 ``__getattr__`` imports
on first use) is in ``__all__``, and ``__all__`` names nothing else. A public noun module
(``errors``, ``config``, ``testing``, ``tools``) also imports helpers for its own use, so there
every public name it *defines* is in ``__all__`` and each name in ``__all__`` is one it defines
or imports. Every name in ``__all__`` resolves.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

WORKSPACE = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = sorted(WORKSPACE.glob("packages/*/src/dsh/*/__init__.py"))
PUBLIC_MODULES = sorted(
    path
    for init in PACKAGE_DIRS
    for path in init.parent.glob("*.py")
    if path.name == "__init__.py" or not path.name.startswith("_")
)


def _module_name(path: Path) -> str:
    package = f"dsh.{path.parent.name}"
    return package if path.name == "__init__.py" else f"{package}.{path.stem}"


def _isort_key(name: str) -> tuple[int, str]:
    # ruff RUF022's isort-style order: CONSTANTS, then Classes, then functions.
    if name.isupper():
        return (0, name)
    return (1 if name[0].isupper() else 2, name)


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name | ast.Attribute) and ast.unparse(test).endswith(
        "TYPE_CHECKING"
    )


def _runtime_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Top-level statements, looking into ``try`` and ``if`` blocks but not TYPE_CHECKING ones."""
    for node in body:
        if isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _runtime_statements(node.body)
            yield from _runtime_statements(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _runtime_statements(block)
            for handler in node.handlers:
                yield from _runtime_statements(handler.body)
        else:
            yield node


def _bound_public_names(tree: ast.Module, *, imports: bool) -> set[str]:
    names: set[str] = set()
    for node in _runtime_statements(tree.body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom) and imports and node.module != "__future__":
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import) and imports:  # `import a.b` binds `a`
            names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
    return {name for name in names if not name.startswith("_")}


def _literal_assigned(tree: ast.Module, name: str) -> object:
    """The literal value of the top-level assignment to ``name``, or ``None`` without one."""
    for node in _runtime_statements(tree.body):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    return None


def _lazy_names(tree: ast.Module) -> set[str]:
    """The keys of a top-level ``_LAZY = {name: module, ...}`` (names served by ``__getattr__``)."""
    value = _literal_assigned(tree, "_LAZY")
    if value is None:
        return set()
    assert isinstance(value, dict), "_LAZY is a dict literal"
    return {str(name) for name in value}


def _declared_all(tree: ast.Module) -> list[str]:
    value = _literal_assigned(tree, "__all__")
    assert value is not None, "no __all__"
    assert isinstance(value, list), "__all__ is a list literal"
    return [str(name) for name in value]


def test_the_six_packages_are_all_checked() -> None:
    assert [p.parent.name for p in PACKAGE_DIRS] == [
        "jobs",
        "subagent",
        "subagent_claude_code",
        "subagent_codex",
        "subprocess",
        "tool_subagent",
    ]


@pytest.mark.parametrize("init", PACKAGE_DIRS, ids=lambda p: f"dsh.{p.parent.name}")
def test_each_package_ships_py_typed(init: Path) -> None:
    assert (init.parent / "py.typed").is_file()


@pytest.mark.parametrize("path", PUBLIC_MODULES, ids=_module_name)
def test_all_is_sorted_and_names_exactly_the_public_names(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    declared = _declared_all(tree)
    assert declared == sorted(declared, key=_isort_key), "__all__ is not sorted"
    assert len(declared) == len(set(declared)), "__all__ repeats a name"
    bound = _bound_public_names(tree, imports=True) | _lazy_names(tree)
    exported = bound if path.name == "__init__.py" else _bound_public_names(tree, imports=False)
    assert sorted(exported - set(declared)) == [], "public names missing from __all__"
    assert sorted(set(declared) - bound) == [], "__all__ names what the module does not bind"
    module = importlib.import_module(_module_name(path))
    # hasattr runs a lazy name's import: each one resolves, to the object its module defines.
    assert [name for name in declared if not hasattr(module, name)] == []
    for name, source in _lazy_sources(module).items():
        assert getattr(module, name) is getattr(importlib.import_module(source), name), name


def _lazy_sources(module: object) -> dict[str, str]:
    lazy = getattr(module, "_LAZY", {})
    assert isinstance(lazy, dict)
    return {str(name): str(source) for name, source in lazy.items()}
