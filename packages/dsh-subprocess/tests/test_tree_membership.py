"""Tree membership on synthetic snapshots: the races a real process table only shows rarely."""

from __future__ import annotations

import time

from dsh.subprocess._procfs import ProcInfo, Snapshot
from dsh.subprocess._tree import Tree

MARKER = "1:2:tree"
ROOT, SHELL, SLEEPER, STRANGER = 900_001, 900_010, 900_020, 900_030


def info(pid: int, ppid: int, pgrp: int, sid: int, *, zombie: bool = False) -> ProcInfo:
    return ProcInfo(pid=pid, ppid=ppid, pgrp=pgrp, sid=sid, start=float(pid), zombie=zombie)


def snapshot(*procs: ProcInfo, markers: dict[int, str] | None = None) -> Snapshot:
    children: dict[int, list[int]] = {}
    groups: dict[int, list[int]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p.pid)
        groups.setdefault(p.pgrp, []).append(p.pid)
        if p.sid != p.pgrp:
            groups.setdefault(p.sid, []).append(p.pid)
    return Snapshot(time.monotonic(), {p.pid: p for p in procs}, markers or {}, children, groups)


def test_a_reparented_child_with_an_unreadable_marker_is_found_by_its_group() -> None:
    root = info(ROOT, 1, ROOT, ROOT)
    tree = Tree(root, ROOT, MARKER)
    # The product starts a shell in a session of its own (Codex's login-shell snapshot does).
    shell = info(SHELL, ROOT, SHELL, SHELL)
    assert not tree.observe(snapshot(root, shell, markers={ROOT: MARKER, SHELL: MARKER}))
    # Both die; the shell's last child was reparented before any snapshot saw it, and its
    # environment could not be read (mid-exec), so no marker is known for it.
    sleeper = info(SLEEPER, 1, SHELL, SHELL)
    assert not tree.observe(snapshot(sleeper))
    assert not tree.gone
    # Gone means only zombies remain.
    assert tree.observe(snapshot(info(SLEEPER, 1, SHELL, SHELL, zombie=True)))


def test_a_group_seen_empty_is_never_watched_again() -> None:
    root = info(ROOT, 1, ROOT, ROOT)
    tree = Tree(root, ROOT, MARKER)
    shell = info(SHELL, ROOT, SHELL, SHELL)
    assert not tree.observe(snapshot(root, shell, markers={ROOT: MARKER, SHELL: MARKER}))
    assert not tree.observe(snapshot(root))  # the shell's group and session are empty now
    # An unrelated process later gets the freed id as its group: it is not ours.
    stranger = info(STRANGER, 1, SHELL, SHELL)
    assert tree.observe(snapshot(stranger))


def test_unrelated_processes_never_join() -> None:
    root = info(ROOT, 1, ROOT, ROOT)
    tree = Tree(root, ROOT, MARKER)
    stranger = info(STRANGER, 1, STRANGER, STRANGER)
    assert not tree.observe(snapshot(root, stranger, markers={ROOT: MARKER}))
    assert tree.observe(snapshot(stranger))


SUPERVISOR = 900_040


def test_the_supervisors_empty_report_settles_a_tree_whose_members_all_descend_from_it() -> None:
    supervisor = info(SUPERVISOR, 1, SUPERVISOR, SUPERVISOR)
    root = info(ROOT, SUPERVISOR, ROOT, ROOT)
    tree = Tree(root, ROOT, MARKER, anchor=supervisor)
    escapee = info(SLEEPER, SUPERVISOR, SLEEPER, SLEEPER)  # setsid, env -i: reparented to it
    assert not tree.observe(snapshot(supervisor, root, escapee, markers={ROOT: MARKER}))
    tree.release_anchor()
    assert tree.settle_by_report()
    assert tree.gone


def test_a_marked_member_outside_the_supervisor_leaves_the_proof_to_scans() -> None:
    supervisor = info(SUPERVISOR, 1, SUPERVISOR, SUPERVISOR)
    root = info(ROOT, SUPERVISOR, ROOT, ROOT)
    tree = Tree(root, ROOT, MARKER, anchor=supervisor)
    # Started by something outside the tree with the run's marker handed to it.
    stranger = info(STRANGER, 1, STRANGER, STRANGER)
    markers = {ROOT: MARKER, STRANGER: MARKER}
    assert not tree.observe(snapshot(supervisor, root, stranger, markers=markers))
    tree.release_anchor()
    assert not tree.settle_by_report()
    assert not tree.observe(snapshot(stranger, markers={STRANGER: MARKER}))
    assert tree.observe(snapshot())
