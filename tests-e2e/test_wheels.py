"""Every distribution builds a wheel that contributes only to the PEP 420 namespace ``dsh``,
and every wheel and sdist carries the license text, classifiers, a readme and bounded siblings."""

from __future__ import annotations

import importlib
import importlib.metadata
import tarfile
import tomllib
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest
from hatchling.builders.sdist import SdistBuilder
from hatchling.builders.wheel import WheelBuilder
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

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


def _metadata(wheel: Path) -> Message:
    archive = zipfile.ZipFile(wheel)
    (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    return Parser().parsestr(archive.read(name).decode("utf-8"))


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_every_distribution_ships_the_mit_license_text(dist: str, tmp_path: Path) -> None:
    license_text = (WORKSPACE / "LICENSE").read_text(encoding="utf-8")
    assert license_text.startswith("MIT License\n")
    assert (WORKSPACE / "packages" / dist / "LICENSE").read_text(encoding="utf-8") == license_text
    wheel = _build_wheel(dist, tmp_path)
    archive = zipfile.ZipFile(wheel)
    (shipped,) = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
    assert archive.read(shipped).decode("utf-8") == license_text
    (sdist,) = SdistBuilder(str(WORKSPACE / "packages" / dist)).build(
        directory=str(tmp_path), versions=["standard"]
    )
    with tarfile.open(sdist) as tar:
        (member,) = [m for m in tar.getmembers() if m.name.endswith("/LICENSE")]
        extracted = tar.extractfile(member)
        assert extracted is not None
        assert extracted.read().decode("utf-8") == license_text
    metadata = _metadata(wheel)
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_every_distribution_has_classifiers_a_readme_and_bounded_siblings(
    dist: str, tmp_path: Path
) -> None:
    metadata = _metadata(_build_wheel(dist, tmp_path))
    classifiers = metadata.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert str(metadata.get_payload()).strip(), "the readme is the long description"
    for requirement in map(Requirement, metadata.get_all("Requires-Dist") or []):
        if requirement.name in DISTRIBUTIONS:
            # A sibling is pinned to its current minor series: >=X.Y,<X.(Y+1).
            major, minor = _version(requirement.name).split(".")[:2]
            series = SpecifierSet(f">={major}.{minor},<{major}.{int(minor) + 1}")
            assert requirement.specifier == series, requirement


def _version(dist: str) -> str:
    project = tomllib.loads((WORKSPACE / "packages" / dist / "pyproject.toml").read_text("utf-8"))
    return str(project["project"]["version"])


def test_dsh_subagent_has_no_extras_that_point_back_at_providers(tmp_path: Path) -> None:
    # The providers depend on dsh-subagent; extras on it that pull them in made a cycle.
    metadata = _metadata(_build_wheel("dsh-subagent", tmp_path))
    assert metadata.get_all("Provides-Extra") is None
    assert [r for r in metadata.get_all("Requires-Dist") or [] if "dsh-" in r] == []


def test_each_package_reports_its_installed_version() -> None:
    for dist in DISTRIBUTIONS:
        module = importlib.import_module("dsh." + dist.removeprefix("dsh-").replace("-", "_"))
        assert module.__version__ == importlib.metadata.version(dist), dist


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_no_wheel_ships_repository_tooling_or_needs_packaging(dist: str, tmp_path: Path) -> None:
    # The notices generator is repository tooling (tools/); it was the only user of `packaging`.
    wheel = _build_wheel(dist, tmp_path)
    archive = zipfile.ZipFile(wheel)
    for name in archive.namelist():
        if name.endswith(".py"):
            source = archive.read(name).decode("utf-8")
            assert "THIRD_PARTY_NOTICES" not in source, name
            assert "from packaging" not in source, name
            assert "import packaging" not in source, name
    runtime = [
        Requirement(raw)
        for raw in _metadata(wheel).get_all("Requires-Dist") or []
        if "extra ==" not in raw
    ]
    assert "packaging" not in {r.name for r in runtime}
