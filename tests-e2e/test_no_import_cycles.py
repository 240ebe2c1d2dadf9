"""The house's shape (issue 41): no import cycle between modules, and no module over 600 lines.

The import graph is read with ``ast`` from the source of all six packages, without importing
anything. An edge is every import statement of a module, at module level or inside a function
(a deferred import is still a dependency, and hiding one in a function is no way out of a
cycle); imports under ``if TYPE_CHECKING:`` are not edges, since they never run. ``from pkg
import name`` is an edge to ``pkg.name`` when that is a module of ours, else to ``pkg``; the
implicit import of a parent package's ``__init__`` is not an edge (every submodule would
otherwise close a cycle through the ``__init__`` that re-exports it).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
_SOURCES = sorted(_ROOT.glob("packages/*/src/dsh/**/*.py"))
#: One concern per module keeps modules short (a median near 200 lines); past this, split it.
_MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(_ROOT).parts)
    parts = parts[parts.index("src") + 1 :]
    parts[-1] = parts[-1].removesuffix(".py")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


_MODULES = {_module_name(path): path for path in _SOURCES}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import in ``tree``, but those in the body of an ``if TYPE_CHECKING:``."""
    skipped = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and _is_type_checking(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skipped
    ]


def _ours(dotted: str) -> str | None:
    """The module of ours that ``dotted`` names, or its nearest enclosing one."""
    while dotted:
        if dotted in _MODULES:
            return dotted
        dotted = dotted.rpartition(".")[0]
    return None


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    base = node.module or ""
    if node.level:
        package = module if _MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    for alias in node.names:
        candidate = f"{base}.{alias.name}"
        yield candidate if candidate in _MODULES else base


def _edges(module: str, source: str) -> set[str]:
    """The modules of ours that ``module`` (whose text is ``source``) imports."""
    found: set[str] = set()
    for node in _imports(ast.parse(source)):
        for target in _targets(module, node):
            ours = _ours(target)
            if ours is not None and ours != module:
                found.add(ours)
    return found


def _graph() -> dict[str, set[str]]:
    return {module: _edges(module, path.read_text()) for module, path in _MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_a_cycle(graph, component) for component in components]


def _a_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """The shortest cycle through the component's first module, found breadth first."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    for node in queue:
        for nxt in sorted(graph[node] & component):
            if nxt == start:
                return [*paths[node], start]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover: an SCC always has one


def test_the_sources_are_found() -> None:
    assert len(_MODULES) > 100
    assert {"dsh.subprocess", "dsh.jobs._registry", "dsh.tool_subagent._mcp"} <= set(_MODULES)


def test_the_edges_count_deferred_and_relative_imports_but_not_type_checking_ones() -> None:
    source = """
from typing import TYPE_CHECKING
import dsh.jobs._job
from dsh.jobs import _store, JobStatus
from . import _holder
from ._types import JobsConfig
if TYPE_CHECKING:
    from dsh.jobs._ray_executor import RayExecutor
else:
    from dsh.jobs import errors
def later() -> None:
    from dsh.jobs._executor_choice import executor_for
"""
    assert _edges("dsh.jobs._registry", source) == {
        "dsh.jobs._job",
        "dsh.jobs._store",
        "dsh.jobs",
        "dsh.jobs._holder",
        "dsh.jobs._types",
        "dsh.jobs.errors",
        "dsh.jobs._executor_choice",
    }
    assert _edges("dsh.jobs", "from ._job import Job") == {"dsh.jobs._job"}


def test_a_cycle_is_named_by_its_modules() -> None:
    graph = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set(), "e": {"a"}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules() -> None:
    cycles = [" -> ".join(cycle) for cycle in _cycles(_graph())]
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(path.relative_to(_ROOT)): count
        for path in _SOURCES
        if (count := len(path.read_text().splitlines())) > _MAX_LINES
    }
    assert long == {}
