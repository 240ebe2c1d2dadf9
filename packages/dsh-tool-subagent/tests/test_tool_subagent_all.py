"""Each public module's __all__ is sorted and complete."""

from __future__ import annotations

import importlib
import inspect

import pytest

MODULES = ["dsh.tool_subagent", "dsh.tool_subagent.errors"]


def _isort_key(name: str) -> tuple[int, str]:
    # ruff RUF022's isort-style order: CONSTANTS, then Classes, then functions.
    if name.isupper():
        return (0, name)
    return (1 if name[0].isupper() else 2, name)


@pytest.mark.parametrize("name", MODULES)
def test_all_is_sorted_and_complete(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported, key=_isort_key)
    public = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_") and not inspect.ismodule(value) and attr != "annotations"
    }
    assert set(exported) == public
