"""The distribution's version, in a module of its own so that modules of the package can read it
without importing the package's ``__init__`` (which imports them: a cycle).

It is read from the installed distribution's ``METADATA`` directly: ``importlib.metadata`` (and
the ``email`` parser it loads) would be most of what ``dsh --version`` costs
(docs/performance.md, "Start-up"). The look-up is the one ``importlib.metadata`` makes for a plain
install (the first ``dsh_tool_subagent-*.dist-info`` along ``sys.path``), and falls back to it.
"""

import os
import sys
from pathlib import Path

_DIST = "dsh_tool_subagent-"


def _from_dist_info() -> str | None:
    for entry in sys.path:
        try:  # names first: a Path per site-packages entry costs start-up a millisecond
            found = [name for name in os.listdir(entry or ".") if name.startswith(_DIST)]  # noqa: PTH208
        except OSError:
            continue
        for path in (Path(entry or ".", name) for name in sorted(found)):
            if path.suffix != ".dist-info":
                continue
            try:
                with (path / "METADATA").open(encoding="utf-8") as metadata:
                    for line in metadata:
                        if line.startswith("Version:"):
                            return line.partition(":")[2].strip()
                        if not line.strip():  # the headers end at the first blank line
                            break
            except OSError:
                continue
    return None


def _read() -> str:
    found = _from_dist_info()
    if found:
        return found
    from importlib import metadata

    try:
        return metadata.version("dsh-tool-subagent")
    except metadata.PackageNotFoundError:  # imported from a source tree that is not installed
        return "0+unknown"


__version__ = _read()
