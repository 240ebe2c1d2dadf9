"""The distribution's version, in a module of its own so that modules of the package can read it
without importing the package's ``__init__`` (which imports them: a cycle)."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("dsh-tool-subagent")
except _metadata.PackageNotFoundError:  # imported from a source tree that is not installed
    __version__ = "0+unknown"
