"""A framework adapter imported without its framework raises an ImportError naming the extra.

The framework is hidden (``sys.modules[name] = None``), so this holds where it is installed (the
workspace) and where it is not (this package tested alone).
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "dsh" / "tool_subagent"
ADAPTERS = [
    ("dsh.tool_subagent.pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ("dsh.tool_subagent.openai_agents", "agents", "openai-agents"),
    ("dsh.tool_subagent.langchain", "langchain_core", "langchain"),
]


@pytest.mark.parametrize(("module", "framework", "extra"), ADAPTERS)
def test_the_import_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, framework: str, extra: str
) -> None:
    # The whole package is hidden: an already imported submodule would be found without its parent.
    for name in [framework, *(n for n in sys.modules if n.startswith(framework + "."))]:
        monkeypatch.setitem(sys.modules, name, None)
    private = module.rpartition(".")[0] + "._" + module.rpartition(".")[2]
    for name in (module, private):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ImportError) as caught:
        importlib.import_module(module)
    assert str(caught.value) == (
        f"the dsh {extra} adapter needs {extra}, which is not installed;"
        f' install it with: pip install "dsh-tool-subagent[{extra}]"'
    )


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.partition(".")[0])
    return found


def test_only_the_adapter_modules_import_a_framework() -> None:
    frameworks = {framework for _, framework, _ in ADAPTERS}
    importing = sorted(path.name for path in SRC.glob("*.py") if _imports(path) & frameworks)
    assert importing == ["_langchain.py", "_openai_agents.py", "_pydantic_ai.py"]
