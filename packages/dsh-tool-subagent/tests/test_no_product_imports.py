"""The tool layer imports no product: it reaches the providers only through the entry points.

Every module of ``dsh.tool_subagent`` is parsed (imports inside functions and ``TYPE_CHECKING``
blocks included, and ``import_module`` / ``__import__`` calls with a literal name), and none may
name a provider package or a product's own package.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "dsh" / "tool_subagent"
FORBIDDEN = ("dsh.subagent_codex", "dsh.subagent_claude_code", "codex_cli_bin", "claude_agent_sdk")
_DYNAMIC = {"import_module", "__import__"}


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and not node.level:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[0]
            if name in _DYNAMIC and isinstance(first, ast.Constant):
                found.append((node.lineno, str(first.value)))
    return found


def _is_product(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in FORBIDDEN)


def test_the_tool_layer_imports_no_product() -> None:
    modules = sorted(SRC.glob("*.py"))
    assert len(modules) > 10, SRC  # the package's sources were found
    offenders = [
        f"{path.name}:{line}: {module}"
        for path in modules
        for line, module in _imported(ast.parse(path.read_text(encoding="utf-8")))
        if _is_product(module)
    ]
    assert offenders == []


def test_the_check_sees_every_form_of_import() -> None:
    source = (
        "import dsh.subagent_codex.testing\n"
        "from dsh.subagent_claude_code import testing\n"
        "from dsh import subagent_codex\n"
        "def f():\n"
        "    import codex_cli_bin\n"
        "    importlib.import_module('claude_agent_sdk._errors')\n"
        "from dsh.subagent import DemoPlan\n"
        "import dsh.subagent_codexx\n"
    )
    flagged = [module for _, module in _imported(ast.parse(source)) if _is_product(module)]
    assert flagged == [
        "dsh.subagent_codex.testing",
        "dsh.subagent_claude_code",
        "dsh.subagent_claude_code.testing",
        "dsh.subagent_codex",
        "codex_cli_bin",
        "claude_agent_sdk._errors",
    ]
