"""No tracked text file holds a merge's conflict markers (a merge resolved in haste left them in
docs/performance.md once, and nothing else would notice them in a Markdown page)."""

from __future__ import annotations

import re
from pathlib import Path

from dsh.subprocess.testing import run_to_exit

WORKSPACE = Path(__file__).resolve().parent.parent
MARKER = re.compile(rb"^(<{7}|>{7})( |$)|^={7}$", re.MULTILINE)


async def test_no_tracked_file_holds_conflict_markers() -> None:
    listed = await run_to_exit(["git", "ls-files"], cwd=WORKSPACE, timeout_s=30)
    assert listed.exit_code == 0, listed.stderr
    paths = [WORKSPACE / name for name in listed.stdout.splitlines() if name]
    assert len(paths) > 100  # the listing found the repository
    marked = [
        str(path.relative_to(WORKSPACE))
        for path in paths
        if path.is_file() and MARKER.search(path.read_bytes())
    ]
    assert marked == []
