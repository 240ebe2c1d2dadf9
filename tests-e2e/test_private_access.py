"""No shipped module reaches into another module's private names (issue 15).

Two rules over the source of all six packages:

* an import never names a private module of another distribution (``claude_agent_sdk._errors``,
  ``mcp.shared._stream_protocols``, or a sibling dsh package's ``_module``);
* ``name._private`` on anything but ``self``/``cls`` appears only where it is listed below: each
  listed access touches a name of the same module, or one dsh sets on its own objects.
"""

from __future__ import annotations

import ast
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
_SOURCES = sorted(_ROOT.glob("packages/*/src/dsh/*/**/*.py"))

#: ``os._exit`` is the documented public way to leave without cleanup, despite its underscore.
_PUBLIC_UNDERSCORED = {"os._exit"}

#: Known accesses, by file name: each is inside the module that defines the name, or the
#: attribute is one dsh itself sets on a foreign object. ``_procfs._IS_LINUX`` is the one
#: cross-module access left in the containment core (see docs/decisions.md, "A kit for provider
#: authors").
_ALLOWED = {
    ("_spawn.py", "_procfs._IS_LINUX"),
    ("_process.py", "proc._start"),
    ("_process.py", "proc._abort_start"),
    ("_spawner.py", "child._control"),
    ("command.py", "handler._dsh_mcp"),
    ("_cli_options.py", "stream._dsh_cli"),
    ("testing.py", "provider._cli_command"),
}


def _own_package(path: Path) -> str:
    parts = path.relative_to(_ROOT).parts
    return "dsh." + parts[parts.index("dsh") + 1]


def _is_private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
        return [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return []


def test_the_sources_are_found() -> None:
    assert len(_SOURCES) > 50
    assert {_own_package(path) for path in _SOURCES} >= {
        "dsh.subprocess",
        "dsh.subagent",
        "dsh.subagent_codex",
        "dsh.subagent_claude_code",
        "dsh.jobs",
        "dsh.tool_subagent",
    }


def test_no_import_names_another_distributions_private_module() -> None:
    found: list[str] = []
    for path in _SOURCES:
        own = _own_package(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for dotted in _imported(node):
                if dotted == own or dotted.startswith(own + "."):
                    continue
                if _is_private(dotted):
                    found.append(f"{path.relative_to(_ROOT)}: {dotted}")
    assert found == []


def test_private_attributes_are_reached_only_where_listed() -> None:
    found: set[tuple[str, str]] = set()
    for path in _SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
                continue
            dotted = f"{node.value.id}.{node.attr}"
            if node.value.id in {"self", "cls"} or dotted in _PUBLIC_UNDERSCORED:
                continue
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                found.add((path.name, dotted))
    assert found - _ALLOWED == set()
