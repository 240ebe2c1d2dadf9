"""SIGTERM and SIGHUP for the ``dsh`` commands: cancel the main task, so teardown runs first.

``timeout``, systemd, ``docker stop`` and a closed terminal stop a command with SIGTERM or SIGHUP.
Their default action kills the interpreter at once and leaves the product trees running, so the
commands turn them into the same path as Ctrl-C: the main task is cancelled, every run is closed
(its whole tree exits), and only then does the command return ``128 + signal``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

__all__ = ["STOP_SIGNALS", "SignalStop", "cancel_on_signals", "exit_code_on_signal"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@dataclass
class SignalStop:
    """The first stop signal received, if any."""

    signum: int | None = None

    @property
    def exit_code(self) -> int:
        assert self.signum is not None
        return 128 + self.signum


@contextlib.contextmanager
def cancel_on_signals() -> Iterator[SignalStop]:
    """While open, SIGTERM/SIGHUP cancel the current task once; later ones are absorbed.

    A second signal must not cancel the teardown that the first one started, and the handlers
    stay installed until the block (and with it the teardown) has finished.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    stop = SignalStop()

    def on_signal(signum: int) -> None:
        if stop.signum is None:
            stop.signum = signum
            task.cancel(f"signal {signum}")

    installed = []
    for signum in STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, on_signal, signum)
            installed.append(signum)
    try:
        yield stop
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


async def exit_code_on_signal(body: Callable[[], Awaitable[int]]) -> int:
    """Await ``body()``; a stop signal cancels it and its exit code becomes ``128 + signal``."""
    with cancel_on_signals() as stop:
        try:
            code = await body()
        except asyncio.CancelledError:
            if stop.signum is None:
                raise
            return stop.exit_code
        # A body that absorbed the cancellation still stopped because of the signal.
        return stop.exit_code if stop.signum is not None else code
