"""The start-up path's readers of installed metadata find what importlib.metadata finds."""

from __future__ import annotations

import sys
import zipfile
from importlib.metadata import entry_points, version
from pathlib import Path

import pytest

from dsh.subagent import PROVIDER_ENTRY_POINT_GROUP
from dsh.subagent._installed import declared_entries, installed_version
from dsh.subagent.testing import write_distribution

GROUP = PROVIDER_ENTRY_POINT_GROUP


def by_importlib_metadata() -> list[tuple[str, str]]:
    """The group as discovery saw it through importlib.metadata: first entry per name."""
    seen: dict[str, str] = {}
    for entry in entry_points(group=GROUP):
        seen.setdefault(entry.name, entry.value)
    return list(seen.items())


def by_reader(path: list[str] | None = None) -> list[tuple[str, str]]:
    found = declared_entries(GROUP, path)
    assert found is not None
    return [(entry.name, entry.value) for entry in found]


def test_the_installed_group_reads_the_same() -> None:
    assert by_reader() == by_importlib_metadata()


def test_shadowing_and_order_match_importlib_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    group = f"[{GROUP}]\n"
    # One project under two spellings in one folder, and again on a later path entry: the
    # first folder importlib.metadata lists wins; an egg-info comes after every dist-info.
    write_distribution(first, "Alpha.Plug", "1.0", f"{group}alpha = alpha_one:P\n")
    write_distribution(first, "alpha_plug", "2.0", f"{group}alpha = alpha_two:P\n")
    beta = f"{group}beta = beta_egg:P\nalpha = beta:P\n"
    write_distribution(first, "beta", "1.0", beta, suffix=".egg-info")
    write_distribution(
        first,
        "gamma",
        "1.0",
        f"# a comment\n[other.group]\ngamma = nope:P\n\n{group}# another\n"
        " gamma =  gamma_mod:Outer.Inner [extra]\n",
    )
    write_distribution(first, "plain")
    write_distribution(second, "alpha_plug", "3.0", f"{group}late = alpha_three:P\n")
    write_distribution(second, "delta", "1.0", f"{group}gamma = delta:P\ndelta = d:P\n")
    paths = [str(first), str(tmp_path / "missing"), str(second)]
    monkeypatch.setattr(sys, "path", paths)
    expected = by_importlib_metadata()
    assert {name for name, _ in expected} == {"alpha", "beta", "gamma", "delta"}
    assert by_reader(paths) == expected


def test_loading_follows_module_and_attribute_path(tmp_path: Path) -> None:
    write_distribution(
        tmp_path, "x", entry_points=f"[{GROUP}]\nnested = json.decoder : JSONDecoder.decode\n"
    )
    (entry,) = declared_entries(GROUP, [str(tmp_path)]) or ()
    from json.decoder import JSONDecoder

    assert entry.load() is JSONDecoder.decode


def test_what_it_cannot_read_is_left_to_importlib_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("z-1.0.dist-info/entry_points.txt", f"[{GROUP}]\nz = z:P\n")
    assert declared_entries(GROUP, [str(tmp_path), str(archive)]) is None

    class DistributionFinder:
        @staticmethod
        def find_distributions(context: object = None) -> list[object]:
            return []

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, DistributionFinder()])
    assert declared_entries(GROUP, [str(tmp_path)]) is None


def test_every_installed_version_reads_the_same() -> None:
    from importlib.metadata import distributions

    names = {dist.metadata["Name"] for dist in distributions()}
    assert len(names) > 5
    for name in sorted(names):
        assert installed_version(name) == version(name), name
    assert installed_version("dsh-no-such-distribution") is None


def test_a_shadowed_version_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    write_distribution(first, "Shadow.Me", "1.0")
    write_distribution(second, "shadow_me", "2.0")
    paths = [str(first), str(second)]
    monkeypatch.setattr(sys, "path", paths)
    assert installed_version("shadow-me", paths) == version("shadow-me") == "1.0"
