"""``SpawnSpec.owned_files``: the spawn creates the owned dir and its files before the program."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from dsh.subprocess import Collect, SpawnError, SpawnSpec, SubprocessRuntime, marked_processes
from dsh.subprocess import _owned_dir as owned_dir_module
from dsh.subprocess import _spawn as spawn_module

pytestmark = [pytest.mark.linux_only, pytest.mark.timeout(60)]

# Prints what the program finds at start: the dir's mode, then each file's mode and content.
INSPECT = (
    "import os, stat, sys\n"
    "d = sys.argv[1]\n"
    "print(oct(stat.S_IMODE(os.stat(d).st_mode)))\n"
    "for name in sorted(os.listdir(d)):\n"
    "    p = os.path.join(d, name)\n"
    "    print(name, oct(stat.S_IMODE(os.stat(p).st_mode)), open(p).read().strip())\n"
)
FILES = {"env.sh": b"unset SECRET\n", "note": b"hello"}


@pytest.fixture(params=[True, False], ids=["supervised", "plain"])
def supervised(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Each test runs with a supervisor and without (the fallback spawn)."""
    on: bool = request.param
    monkeypatch.setattr(spawn_module, "_SUPERVISED", on)
    return on


@pytest.fixture
def host_makes(record_calls: Any) -> list[str]:
    """The owned dirs the host's own process made (each still really made)."""

    def made(spec: SpawnSpec) -> str | None:
        return None if spec.owned_files is None else str(spec.owned_dir)

    makes: list[str] = record_calls(
        spawn_module, "make_owned_dir", owned_dir_module.make_owned_dir, made
    )
    return makes


async def test_the_program_starts_with_the_dir_and_its_files(
    runtime: SubprocessRuntime,
    tmp_path: Path,
    supervised: bool,
    host_makes: list[str],
) -> None:
    owned = tmp_path / "owned"
    spec = SpawnSpec(
        [sys.executable, "-c", INSPECT, str(owned)],
        stdout=Collect(4096),
        owned_dir=owned,
        owned_files=FILES,
    )
    proc = await runtime.spawn(spec)
    assert (proc._supervised is not None) is supervised
    assert (await proc.wait()).exit_code == 0
    await proc.aclose()
    assert proc.collected("stdout").text.splitlines() == [
        "0o700",
        "env.sh 0o400 unset SECRET",
        "note 0o400 hello",
    ]
    # The supervisor made it, so the host's process did not; without one, the host did.
    assert host_makes == ([] if supervised else [str(owned)])
    assert not owned.exists()
    assert marked_processes(proc.tree_id) == []


@pytest.mark.parametrize("planted", ["symlink", "directory"])
async def test_something_already_at_the_path_fails_the_spawn_untouched(
    runtime: SubprocessRuntime,
    tmp_path: Path,
    supervised: bool,
    planted: str,
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("mine")
    path = tmp_path / "owned"
    if planted == "symlink":
        path.symlink_to(elsewhere)  # an attacker's link where the run dir is to be made
    else:
        elsewhere.rename(path)  # someone's own dir at that path: a caller's mistake, say
        elsewhere = path
    spec = SpawnSpec(["true"], owned_dir=path, owned_files=FILES)
    with pytest.raises(SpawnError, match=r"cannot create owned_dir \(EEXIST\)"):
        await runtime.spawn(spec)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["keep"]  # nothing written, or removed
    assert (elsewhere / "keep").read_text() == "mine"


async def test_a_failed_exec_removes_the_dir_it_made(
    runtime: SubprocessRuntime,
    tmp_path: Path,
    supervised: bool,
) -> None:
    owned = tmp_path / "owned"
    spec = SpawnSpec(["/nonexistent/program"], owned_dir=owned, owned_files=FILES)
    with pytest.raises(SpawnError, match="executable not found"):
        await runtime.spawn(spec)
    assert not owned.exists()


def test_owned_files_needs_owned_dir() -> None:
    with pytest.raises(ValueError, match="owned_files needs owned_dir"):
        SpawnSpec(["true"], owned_files=FILES)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "nul\0"])
def test_owned_files_names_are_plain_file_names(name: str) -> None:
    with pytest.raises(ValueError, match="owned_files names must be plain file names"):
        SpawnSpec(["true"], owned_dir="/tmp/x", owned_files={name: b""})


def test_owned_files_content_is_bytes() -> None:
    with pytest.raises(ValueError, match="owned_files content for 'a' must be bytes"):
        SpawnSpec(["true"], owned_dir="/tmp/x", owned_files={"a": "text"})  # type: ignore[dict-item]


def test_owned_files_is_a_mapping() -> None:
    with pytest.raises(ValueError, match="owned_files must be a mapping"):
        SpawnSpec(["true"], owned_dir="/tmp/x", owned_files=[("a", b"")])  # type: ignore[arg-type]
