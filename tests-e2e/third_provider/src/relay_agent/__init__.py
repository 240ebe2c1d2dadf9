"""relay-agent: a scripted stand-in coding agent (the "product" of the Relay provider).

The distribution carries its executable, ``agent.py``, as a real product's wheel carries its
binary; :func:`executable` names it. It imports nothing from dsh.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["__version__", "executable"]

__version__ = "1.0.0"


def executable() -> Path:
    """The product's executable (a Python script, run with the host's interpreter)."""
    return Path(__file__).with_name("agent.py")
