"""Whole-tree membership and the signal tiers of one spawn.

The tree of a spawn is the union of its process group and session, every descendant ever
observed (keyed by pid and start token, so a reused pid never counts), and every process of this
user whose environment carries the spawn's marker. "Gone" means no non-zombie member remains,
and, under the kernel layer, that the run's cgroup is empty.

Under a supervisor (``_spawner_main``) the tree is also everything below the supervisor, its
*anchor*: a subreaper, so an orphan anywhere in the tree is reparented to it rather than to init,
whatever ``setsid``, double fork or ``env -i`` it used. The anchor is never a member itself, and
the tree is gone only once the supervisor has also reported that nothing is left below it.

Members seen without the marker are written to the host's member record (``_record``), so that
``reap_orphans()`` can find them after the host, its spawner and their supervisor all died.

The groups and sessions that members lead or join are watched too, until one is seen empty (its
id may then be reused, so it is never watched again). That closes a race the marker alone leaves
open: a member forks a child and dies, the child is reparented before any snapshot showed it as a
descendant, and its environment cannot be read while it is in the middle of ``exec`` (seen with a
product's login-shell snapshot polling a lock with ``sleep 0.1``). Its group still names it.
"""

from __future__ import annotations

import signal
import threading
import time

from dsh.subprocess._cgroup import RunGroup
from dsh.subprocess._procfs import ProcInfo, Snapshot, is_own, killpg, send_signal
from dsh.subprocess._record import record

__all__ = ["Tree"]

_Key = tuple[int, float]


class Tree:
    """Thread-safe membership state of one spawn's tree."""

    def __init__(
        self,
        root: ProcInfo | None,
        pgid: int,
        marker: str,
        anchor: ProcInfo | None = None,
        group: RunGroup | None = None,
    ) -> None:
        self.pgid = pgid
        self.group = group
        """The run's cgroup (kernel layer): the tree is gone only once it is empty too."""
        self.marker = marker
        self._lock = threading.Lock()
        self._anchor = anchor
        """The supervisor whose descendants all belong to the tree, until it reports empty."""
        self._known: dict[int, float] = {}
        self._alive: dict[int, ProcInfo] = {}
        if root is not None:
            self._known[root.pid] = root.start
            self._alive[root.pid] = root
        self._groups: set[int] = {pgid}
        """Group or session ids of the tree still watched (the spawn's own first)."""
        self._dropped: set[int] = set()
        """Ids seen empty once: never watched again (they may be reused)."""
        self._termed: set[_Key] = set()
        self._below_anchor: set[int] = {root.pid} if root is not None and anchor else set()
        """Members below the supervisor, in the latest snapshot: it sends their SIGTERM."""
        self._outside_anchor = False
        """A snapshot once showed a live member that was not below the supervisor."""
        self.term_pending = False
        """Members below the supervisor need a SIGTERM it has not yet been asked to send."""
        self._killed: set[_Key] = set()
        self.gone = False
        self.created = time.monotonic()

    def _members(self, snap: Snapshot) -> dict[int, ProcInfo]:
        procs = snap.procs
        members: dict[int, ProcInfo] = {}
        for pid, start in list(self._known.items()):
            info = procs.get(pid)
            if info is None or info.start != start:
                del self._known[pid]
            else:
                members[pid] = info
        for pid, marker in snap.markers.items():
            if marker == self.marker:
                members[pid] = procs[pid]
        anchor = self._anchor
        below: set[int] = set()
        if anchor is not None:
            current = procs.get(anchor.pid)
            if current is not None and current.start == anchor.start:
                stack = list(snap.children.get(anchor.pid, ()))
                while stack:
                    pid = stack.pop()
                    if pid not in below:
                        below.add(pid)
                        members[pid] = procs[pid]
                        stack.extend(snap.children.get(pid, ()))
        self._below_anchor = below
        watched: set[int] = set()
        while True:
            for group_id in self._groups - watched:
                watched.add(group_id)
                group = snap.groups.get(group_id, ())
                if not group:
                    # The id is free now and could be reused by an unrelated group: never again.
                    self._dropped.add(group_id)
                for pid in group:
                    members[pid] = procs[pid]
            self._groups -= self._dropped
            stack = list(members)
            while stack:
                for child in snap.children.get(stack.pop(), ()):
                    if child not in members:
                        members[child] = procs[child]
                        stack.append(child)
            found = {
                group_id
                for info in members.values()
                if not is_own(info)
                for group_id in (info.pgrp, info.sid)
                if group_id > 1 and group_id not in self._dropped
            }
            if found <= self._groups:
                break
            self._groups |= found
        unmarked = [
            (pid, info.start)
            for pid, info in members.items()
            if pid not in self._known and not info.zombie and snap.markers.get(pid) != self.marker
        ]
        if unmarked:
            record.add(self.marker.rpartition(":")[0], unmarked)
        for pid, info in members.items():
            self._known[pid] = info.start
        alive = {pid: info for pid, info in members.items() if not info.zombie and not is_own(info)}
        if anchor is not None and not alive.keys() <= below:
            self._outside_anchor = True
        return alive

    def _observe(self, snap: Snapshot) -> dict[int, ProcInfo]:
        if self.gone:
            return {}
        if snap.taken < self.created:
            return self._alive  # older than the spawn: it cannot show the tree
        alive = self._members(snap)
        self._alive = alive
        if not alive and self._anchor is None:
            group = self.group
            if group is not None and group.populated():
                # Every other layer sees nothing, yet the group holds a process: one that
                # escaped them all (a tool killed the supervisor and the spawner). Kill it.
                group.kill()
            else:
                self.gone = True
        return alive

    def live_pids(self, snap: Snapshot) -> list[int]:
        """The members alive in ``snap`` (recorded as an observation)."""
        with self._lock:
            return sorted(self._observe(snap))

    def watched_pids(self) -> frozenset[int]:
        """The pids whose state decides this tree: its members so far and its supervisor."""
        with self._lock:
            pids = set(self._known)
            if self._anchor is not None:
                pids.add(self._anchor.pid)
            return frozenset(pids)

    def release_anchor(self) -> None:
        """The supervisor reported the tree empty, or is gone: from now on scans alone decide."""
        with self._lock:
            self._anchor = None

    def settle_by_report(self, groups_removed: bool = False) -> bool:
        """The supervisor, alive throughout, reported that nothing is left below it: True when
        that alone proves the tree gone (no scan).

        Every member descends from the supervisor, a subreaper, so its ``E`` report (no child
        left to wait for) is structural proof; a marked process can only inherit the marker from
        a member. Not when a snapshot once showed a member outside the supervisor, and not while
        the run's cgroup still holds a process: then scans decide, as before. ``groups_removed``:
        the supervisor removed the run's cgroup, which the kernel allows only when it is empty.
        """
        with self._lock:
            if not self.gone and not self._outside_anchor:
                group = self.group
                if group is None or groups_removed or not group.populated():
                    self.gone = True
                    self._alive = {}
            return self.gone

    def observe(self, snap: Snapshot) -> bool:
        """Record a snapshot; True once the whole tree is gone."""
        with self._lock:
            self._observe(snap)
            return self.gone

    def term_known(self) -> None:
        """SIGTERM, once each, to the members seen in the latest snapshot (no scan)."""
        with self._lock:
            if not self.gone:
                self._signal(self._alive, signal.SIGTERM, self._termed)

    def term(self, snap: Snapshot) -> bool:
        """Observe, then SIGTERM every member not yet sent one. True once gone."""
        with self._lock:
            alive = self._observe(snap)
            self._signal(alive, signal.SIGTERM, self._termed)
            return self.gone

    def kill(self, snap: Snapshot) -> bool:
        """Observe, then SIGKILL the group and every member not yet killed. True once gone."""
        with self._lock:
            alive = self._observe(snap)
            if alive:
                if self.pgid in self._groups:
                    killpg(self.pgid, signal.SIGKILL)
                self._signal(alive, signal.SIGKILL, self._killed)
            return self.gone

    def kill_new(self, snap: Snapshot) -> bool:
        """SIGKILL members never killed before; True when any such member was found."""
        with self._lock:
            alive = self._observe(snap)
            fresh = {
                pid: info for pid, info in alive.items() if (pid, info.start) not in self._killed
            }
            if fresh:
                if self.pgid in self._groups:
                    killpg(self.pgid, signal.SIGKILL)
                self._signal(fresh, signal.SIGKILL, self._killed)
            return bool(fresh)

    def _signal(self, alive: dict[int, ProcInfo], sig: int, sent: set[_Key]) -> None:
        for pid, info in alive.items():
            key = (pid, info.start)
            if key not in sent:
                sent.add(key)
                if sig == signal.SIGTERM and pid in self._below_anchor:
                    # The supervisor sends it (once each), so no process gets two.
                    self.term_pending = True
                else:
                    send_signal(info, sig)
