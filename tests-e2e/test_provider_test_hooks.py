"""Every product provider's ``testing`` module offers the same test hooks (issue 15).

Parametrised over the tool layer's product table, so a third product is checked by adding its
row there.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from types import ModuleType

import pytest

from dsh.subagent import TextBlock
from dsh.tool_subagent._known_providers import KNOWN_PROVIDERS, KnownProvider, load_provider

SHARED = {
    "Behaviour",
    "RecordedRequest",
    "hermetic_env",
    "make_start_request",
    "provider_with_program",
}

_PRODUCTS = pytest.mark.parametrize("known", KNOWN_PROVIDERS, ids=lambda known: known.kind)


def _testing(known: KnownProvider) -> ModuleType:
    return importlib.import_module(f"{known.package}.testing")


def test_the_table_holds_the_shipped_products() -> None:
    assert {known.kind for known in KNOWN_PROVIDERS} >= {"codex", "claude-code"}


@_PRODUCTS
def test_the_shared_hooks_are_exported(known: KnownProvider) -> None:
    assert set(_testing(known).__all__) >= SHARED


@_PRODUCTS
def test_make_start_request_is_the_same_in_all(known: KnownProvider, tmp_path: Path) -> None:
    module = _testing(known)
    request = module.make_start_request(tmp_path, "a ", "b")
    assert request.prompt == (TextBlock("a "), TextBlock("b"))
    assert request.parent.cwd == str(tmp_path)
    assert request.descriptor.provider == known.kind
    assert module.make_start_request(None, "x").parent.cwd is None


@_PRODUCTS
def test_provider_with_program_takes_config_then_program(known: KnownProvider) -> None:
    hook = _testing(known).provider_with_program
    loaded = load_provider(known.kind)
    provider = hook(loaded.config, [sys.executable, "stand_in.py"])  # type: ignore[attr-defined]
    assert type(provider) is type(loaded)
    assert type(provider).__module__.startswith(f"{known.package}.")
    assert list(inspect.signature(hook).parameters)[:2] == ["config", "program"]
