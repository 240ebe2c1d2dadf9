"""A program that leaves an escapee, then exits at once (it prints ``forked`` first).

The escapee is in a session of its own, ignores SIGTERM and outlives the program by 0.3 s; given
a directory (argv[1]), it then writes ``late`` into it (recreating the directory if it is gone),
so a removal that did not wait for the whole tree leaves the directory behind.
"""

import os
import signal
import sys
import time
from pathlib import Path

if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.setsid()
    time.sleep(0.3)
    if sys.argv[1:]:
        Path(sys.argv[1], "late").mkdir(parents=True, exist_ok=True)
    os._exit(0)
print("forked", flush=True)
