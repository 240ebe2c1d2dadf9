"""Process-table snapshots: fresh enough for every caller, and shared by concurrent callers."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from dsh.subprocess import _procfs


def test_a_snapshot_never_begins_before_the_call() -> None:
    for _ in range(5):
        asked = time.monotonic()
        assert _procfs.scan(0.0).taken >= asked


def test_max_age_reuses_a_recent_snapshot() -> None:
    first = _procfs.scan(0.0)
    assert _procfs.scan(60.0) is first


def test_concurrent_urgent_callers_share_readings(monkeypatch: pytest.MonkeyPatch) -> None:
    real = _procfs._list_procs
    inside = threading.Event()
    release = threading.Event()
    readings: list[float] = []

    def held() -> Any:
        readings.append(time.monotonic())
        inside.set()
        release.wait(10)
        return real()

    monkeypatch.setattr(_procfs, "_list_procs", held)
    first = threading.Thread(target=_procfs.scan, args=(0.0,))
    first.start()
    assert inside.wait(10)
    # Six more callers arrive while the first reading is in progress.
    results: list[_procfs.Snapshot] = []
    waiting = [threading.Thread(target=lambda: results.append(_procfs.scan(0.0))) for _ in range(6)]
    for thread in waiting:
        thread.start()
    time.sleep(0.05)
    release.set()
    for thread in [first, *waiting]:
        thread.join(10)
    assert len(results) == 6
    assert len(readings) == 2  # the first reading, then one more shared by all six
    assert len({id(snap) for snap in results}) == 1
