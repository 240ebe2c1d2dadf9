"""The ``dsh`` command's shared handles: ``-v``, ``--log-level``, ``--timeout``, closed stdout."""

from __future__ import annotations

import argparse
import io
import logging
import math
import os
import sys
from collections.abc import Callable

__all__ = [
    "EXIT_BROKEN_PIPE",
    "LOG_LEVELS",
    "add_common_options",
    "configure_logging",
    "guard_broken_pipe",
    "positive_seconds",
]

#: 128 + SIGPIPE: what a command killed by the default SIGPIPE action reports.
EXIT_BROKEN_PIPE = 141
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_LOG_FORMAT = "dsh: %(levelname)s %(name)s: %(message)s"


def add_common_options(parser: argparse.ArgumentParser, *, top_level: bool) -> None:
    """``-v`` and ``--log-level``, accepted before and after the subcommand.

    On subcommands the defaults are suppressed, so ``dsh -v run ...`` is not reset by the
    subcommand's own default.
    """
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0 if top_level else argparse.SUPPRESS,
        help="log more to stderr (-v info, -vv debug)",
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        metavar="LEVEL",
        default=None if top_level else argparse.SUPPRESS,
        help="log level on stderr: debug, info, warning or error (overrides -v)",
    )


def _level(args: argparse.Namespace) -> int | None:
    name = getattr(args, "log_level", None)
    if name is not None:
        return int(getattr(logging, name))
    verbose = int(getattr(args, "verbose", 0) or 0)
    if verbose <= 0:
        return None
    return logging.INFO if verbose == 1 else logging.DEBUG


def configure_logging(args: argparse.Namespace, *, handler: bool) -> None:
    """Apply ``-v`` / ``--log-level`` to the ``dsh`` loggers; nothing changes without them.

    ``handler=False`` only sets the level: ``dsh mcp`` installs its own stderr handler.
    DEBUG records may carry raw product causes; they go to the operator's stderr only.
    """
    level = _level(args)
    if level is None:
        return
    logger = logging.getLogger("dsh")
    logger.setLevel(level)
    if handler and not any(getattr(h, "_dsh_cli", False) for h in logger.handlers):
        stream = logging.StreamHandler(sys.stderr)
        stream._dsh_cli = True  # type: ignore[attr-defined]
        stream.setFormatter(logging.Formatter(_LOG_FORMAT))
        logger.addHandler(stream)
        logger.propagate = False


def positive_seconds(text: str) -> float:
    """``--timeout``: a finite number of seconds above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text!r}")
    return value


def _discard_stdout() -> None:
    # The interpreter flushes stdout again at exit; pointing fd 1 at /dev/null makes that flush
    # (and the "Exception ignored" traceback it would print) a no-op.
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def guard_broken_pipe(body: Callable[[], int]) -> int:
    """Run a command; a reader that went away (``dsh ... | head -1``) ends it quietly with 141."""
    try:
        code = body()
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    return code
