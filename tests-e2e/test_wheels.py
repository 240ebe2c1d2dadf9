"""Every distribution builds a wheel that contributes only to the PEP 420 namespace ``dsh``."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from hatchling.builders.wheel import WheelBuilder

WORKSPACE = Path(__file__).resolve().parent.parent
DISTRIBUTIONS = sorted(p.name for p in (WORKSPACE / "packages").iterdir() if p.is_dir())


def _build_wheel(dist: str, out: Path) -> Path:
    builder = WheelBuilder(str(WORKSPACE / "packages" / dist))
    (built,) = list(builder.build(directory=str(out), versions=["standard"]))
    return Path(built)


def test_all_six_distributions_are_present() -> None:
    assert DISTRIBUTIONS == [
        "dsh-jobs",
        "dsh-subagent",
        "dsh-subagent-claude-code",
        "dsh-subagent-codex",
        "dsh-subprocess",
        "dsh-tool-subagent",
    ]


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_wheel_ships_only_the_dsh_namespace(dist: str, tmp_path: Path) -> None:
    wheel = _build_wheel(dist, tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/", 1)[0] for name in names if not name.endswith(".dist-info/")}
    top_level = {name for name in top_level if not name.endswith(".dist-info")}
    assert top_level == {"dsh"}, f"{dist} ships top-level names {sorted(top_level)}"
    assert "dsh/__init__.py" not in names, f"{dist} breaks the namespace with dsh/__init__.py"
    module = dist.removeprefix("dsh-").replace("-", "_")
    assert f"dsh/{module}/__init__.py" in names
    assert f"dsh/{module}/py.typed" in names
    assert not [n for n in names if "/tests/" in n or n.startswith("tests/")]


def test_no_source_tree_holds_a_namespace_init() -> None:
    strays = sorted(WORKSPACE.glob("packages/*/src/dsh/__init__.py"))
    assert strays == []
