"""A spec's ``owned_dir``, made and removed by the host when no supervisor does it.

The supervisor (``_spawner_main``, which imports nothing of the host's) has its own copy of both
steps; these are the host's, for the fallback spawn without a supervisor and for a tree whose
supervisor is gone.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from dsh.subprocess._spec import SpawnSpec

__all__ = ["make_owned_dir", "remove_owned_dir"]

_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def make_owned_dir(spec: SpawnSpec) -> None:
    """Create ``spec.owned_dir`` (mode 0700) and its ``owned_files`` (mode 0400), if asked.

    Like the supervisor's, the ``mkdir`` fails if anything is at the path already (a symlink
    included), so nothing there is ever written through.
    """
    if spec.owned_files is None or spec.owned_dir is None:
        return
    path = Path(spec.owned_dir)
    path.mkdir(mode=0o700)
    for name, content in spec.owned_files.items():
        fd = os.open(path / name, _FILE_FLAGS, 0o400)
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


def remove_owned_dir(path: str) -> None:
    """Remove a spec's ``owned_dir`` and all it holds (errors ignored: it may be gone already)."""
    shutil.rmtree(path, ignore_errors=True)
