"""The spawner process: forks supervisors, and each supervisor holds one spawn's whole tree.

Run as ``python -I -S _spawner_main.py <request fd> <owner id>`` by ``_spawner.py``; stdlib only,
single-threaded, and never imported by the host.

Why a separate process: setting ``PR_SET_CHILD_SUBREAPER`` between fork and exec needs a full
fork of the host (``preexec_fn`` disables vfork), which costs 20 ms at 1 GB of host memory and
95 ms at 4 GB. This process is small, so its forks are cheap, and they happen ahead of time: the
host keeps a standby supervisor or two, so a spawn costs one request and one vfork-and-exec
(a fork of this small process when the spawn asks for a nice value, set before ``exec``).

- The **spawner** receives one control socket per request and forks a supervisor holding it. It
  is itself a subreaper, so the tree of a supervisor that dies is reparented to it, and it kills
  every such adoptee. It exits once the host's end of its socket closes (the host exited or
  died) and it has no children left.
- A **supervisor** waits on its control socket for one spawn request (framed like the spawner's,
  with the stdio descriptors), sets ``PR_SET_CHILD_SUBREAPER``, and starts the program with
  ``subprocess.Popen`` (vfork, new session, default signals). Every orphan below it, whatever
  ``setsid``, double fork or ``env -i`` it used, is reparented to it and stays its descendant.
  Under the kernel layer (``_cgroup.py``) a standby makes and joins its run's cgroup v2 group as
  soon as it is forked (the spawner's order names it), and at the request the v1 limit groups
  too; so the program and all it ever starts are in the run's groups from their first
  instruction.
  Right after reporting the start it goes back to the host's groups, so limits count the
  product's tree only and a tool that kills the supervisor leaves the group whole. (Joining
  costs about 7 ms, an RCU grace period, which the standby pays ahead of the request.)
  It reports, one line each::

      S <pid> <own pid>   the program runs (and this supervisor's pid)
      F <stage> <errno>   it could not start (stage: cwd, exec, request, cgroup, dir)
      X <wait status>     the program exited (raw status, as from waitpid)
      G                   the run's cgroup directories the request named (``drop``) are
                          removed, which the kernel allows only for empty groups (before E)
      E                   nothing is left below the supervisor: the tree is gone

  A request may name an owned directory (``remove``): the supervisor removes it, with all it
  holds, once the tree is gone and before it reports ``E``, so the host does no filesystem work
  for it, and a host that died does not leave it behind. With ``make`` (file names to contents)
  the supervisor first creates it, and those read-only files in it, before the program starts.

  It accepts ``T`` (SIGTERM every descendant, once each) and ``K`` (SIGKILL every descendant,
  again and again, until none is left). When the host's end closes it does ``K`` by itself, so a
  host that dies, even by SIGKILL, takes its trees with it. ``E`` is structural proof of exit: a
  supervisor with no child left to wait for has no descendant left, and a process whose main
  thread exited while other threads run cannot be waited for until its last thread is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import marshal
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from typing import NoReturn

_PR_SET_CHILD_SUBREAPER = 36
_HEADER = struct.Struct("!I")
_MAX_FDS = 4
_MAX_REQUEST = 64 * 1024 * 1024
_IDLE_S = 1.0
_KILL_STEP_S = 0.005
_KILL_FAST_FOR_S = 2.0
_KILL_SLOW_STEP_S = 0.2
_DRAIN_LIMIT_S = 30.0
_IMAGE_WAIT_S = 0.05


_libc: ctypes.CDLL | None = None


def _subreaper() -> None:
    global _libc
    libc = _libc = _libc or ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, start ticks) of ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
        rest = data[data.rindex(b")") + 2 :].split()
        return int(rest[1]), int(rest[19])
    except (OSError, ValueError, IndexError):
        return None


def _descendants(root: int) -> dict[int, int]:
    """pid -> start ticks of every process below ``root`` (one pass over /proc)."""
    children: dict[int, list[tuple[int, int]]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = _stat(int(name))
            if info is not None:
                children.setdefault(info[0], []).append((int(name), info[1]))
    found: dict[int, int] = {}
    stack = [root]
    while stack:
        for pid, start in children.get(stack.pop(), ()):
            if pid not in found:
                found[pid] = start
                stack.append(pid)
    return found


def _signal_all(members: dict[int, int], sig: int, sent: set[tuple[int, int]] | None) -> None:
    for pid, start in members.items():
        if sent is not None:
            if (pid, start) in sent:
                continue
            sent.add((pid, start))
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def _reap(wanted: int) -> tuple[int | None, bool]:
    """Reap every exited child: (wait status of ``wanted`` if it was reaped, any child left)."""
    status = None
    while True:
        try:
            pid, raw = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status, False
        if pid == 0:
            return status, True
        if pid == wanted:
            status = raw


def _send(ctl: socket.socket, message: bytes) -> None:
    with contextlib.suppress(OSError):  # the host is gone; the tree is killed all the same
        ctl.send(message)


def _fail(ctl: socket.socket, stage: bytes, errno: int | None = 0) -> NoReturn:
    """Report that the program could not start (``F <stage> <errno>``), and end."""
    _send(ctl, b"F %s %d\n" % (stage, errno or 0))
    os._exit(0)


def _ignore(*_: object) -> None:
    """A no-op handler: unlike SIG_IGN, it is reset to the default by exec."""


def _lower_own_priority(nice: object) -> None:
    """Between fork and exec, in the program's process (after its ``setsid``): take ``nice``, so
    every thread and child the program starts, however early, inherits it; then the new
    session's autogroup. Never above the current priority; a failure never fails the spawn."""
    if not isinstance(nice, int):
        return
    with contextlib.suppress(OSError):
        if nice > os.getpriority(os.PRIO_PROCESS, 0):
            os.setpriority(os.PRIO_PROCESS, 0, nice)
    if nice > 0:
        with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as handle:
            handle.write(str(nice))


def _start_program(request: dict[str, object], stdio: list[int | None]) -> subprocess.Popen[bytes]:
    argv, env, cwd = request["argv"], request["env"], request["cwd"]
    if not (
        isinstance(argv, list)
        and all(isinstance(arg, bytes) for arg in argv)
        and isinstance(env, dict)
        and (cwd is None or isinstance(cwd, bytes))
    ):
        raise TypeError("malformed request")
    streams = [subprocess.DEVNULL if fd is None else fd for fd in stdio]
    nice = request.get("nice")
    # The supervisor is single-threaded, so code between fork and exec is safe here. Only a
    # spawn that asks for a priority pays for it (fork instead of vfork).
    before_exec = None if nice is None else functools.partial(_lower_own_priority, nice)
    return subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=streams[0],
        stdout=streams[1],
        stderr=streams[2],
        start_new_session=True,
        close_fds=True,
        restore_signals=True,
        preexec_fn=before_exec,
    )


def _move_to(paths: object, index: int) -> None:
    """Write this process's pid to ``paths[i][index]`` for each pair (join, home)."""
    if not isinstance(paths, list):
        return
    me = b"%d" % os.getpid()
    for pair in paths:
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[index], bytes)):
            raise TypeError("malformed request")
        fd = os.open(pair[index], os.O_WRONLY)
        try:
            os.write(fd, me)
        finally:
            os.close(fd)


def _drop_groups(groups: object) -> None:
    """Leave ``groups`` and remove their directories (best effort; the host's stays)."""
    with contextlib.suppress(OSError, TypeError):
        _move_to(groups, 1)
    for join, _ in groups if isinstance(groups, list) else ():
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(join))


def _await_image(pid: int) -> None:
    """Wait (briefly) until the program's environment is readable.

    A vfork parent resumes as soon as the child's old memory is released, before the new image's
    environment is in place; until then ``/proc/<pid>/environ`` reads empty and the tree marker
    cannot be seen. Reporting the start only after it can keeps ``spawn()``'s promise simple.
    """
    deadline = time.monotonic() + _IMAGE_WAIT_S
    tries = 0
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                if handle.read(1):
                    return
        except OSError:
            return  # gone already, or not ours to read
        tries += 1
        if tries > 20:  # it is usually there within a few reads; then stop spinning
            time.sleep(0.0002)


def _warm_up() -> None:
    """Run the spawn path once while on standby, off any caller's clock.

    A supervisor is a fork of the spawner: the first time it runs ``Popen`` every page it touches
    is copied on write, which doubled the spawn's own time (4.1 ms vs 2.1 ms, measured under
    load). One throwaway spawn of ``true`` takes those faults ahead of the request.
    """
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        warm = subprocess.Popen(
            ["true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        os.waitpid(warm.pid, 0)


def _make_group(dirs: object) -> None:
    """Make the standby's group: ``[owner dir, group dir]`` (the owner dir may exist)."""
    if dirs is None:
        return
    if not (isinstance(dirs, list) and len(dirs) == 2 and all(isinstance(d, bytes) for d in dirs)):
        raise TypeError("malformed order")
    with contextlib.suppress(FileExistsError):
        os.mkdir(dirs[0])
    os.mkdir(dirs[1])


def _supervise(ctl: socket.socket, standby_groups: object, make: object = None) -> None:
    """A standby supervisor: wait for one request, run it, hold its tree until it is empty."""
    try:
        _make_group(make)
        _move_to(standby_groups, 0)
        in_group = bool(standby_groups)
    except (OSError, TypeError):
        in_group = False  # reported at the request, which decides whether that matters
        if isinstance(make, list) and make and isinstance(make[-1], bytes):
            with contextlib.suppress(OSError):
                os.rmdir(make[-1])  # made but not joined: empty, and no one else's
    _warm_up()
    received = None
    with contextlib.suppress(OSError, ValueError, EOFError, TypeError):
        received = _recv_request(ctl)
    if received is None:
        if in_group:  # leave and remove the group the host made for it (its host may be gone)
            _drop_groups(standby_groups)
        os._exit(0)  # the host no longer needs this standby
    request, stdio_fds = received
    layout = request.get("stdio")
    if not isinstance(layout, list) or len(layout) != 3:
        _fail(ctl, b"request")
    stdio = [None if slot is None else stdio_fds[slot] for slot in layout]
    _subreaper()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, _ignore)
    groups = request.get("cgroups")
    try:
        if request.get("leave") and in_group:
            _move_to(standby_groups, 1)  # the host runs this one without the kernel layer
        elif request.get("in_group") and not in_group:
            raise OSError(0, "the standby could not join its group")
        _move_to(groups, 0)
    except OSError as exc:
        _fail(ctl, b"cgroup", exc.errno)
    except TypeError:
        _fail(ctl, b"request")
    try:
        _make_owned(request.get("remove"), request.get("make"))
    except OSError as exc:
        _fail(ctl, b"dir", exc.errno)
    except TypeError:
        _fail(ctl, b"request")
    try:
        program = _start_program(request, stdio)
    except OSError as exc:
        stage = b"cwd" if request["cwd"] is not None and exc.filename == request["cwd"] else b"exec"
        _fail(ctl, stage, exc.errno)
    except (ValueError, TypeError):
        _fail(ctl, b"request")
    finally:
        for fd in stdio_fds:
            os.close(fd)
    pid = program.pid  # reaped by the loop below (waitpid), never through Popen
    _await_image(pid)
    me = os.getpid()
    _send(ctl, b"S %d %d\n" % (pid, me))
    with contextlib.suppress(OSError, TypeError):
        # Back home, after the report: the move may wait out an RCU grace period (~7 ms).
        # Staying in would be harmless, only counted in the limits.
        if request.get("in_group") and not request.get("leave"):
            _move_to(standby_groups, 1)
        _move_to(groups, 1)
    termed: set[tuple[int, int]] = set()
    killing_since: float | None = None
    exited = False
    while True:
        status, left = _reap(pid)
        exit_report = b""
        if status is not None:
            exited = True
            exit_report = b"X %d\n" % status
            if left:
                _send(ctl, exit_report)
                exit_report = b""
        if exited and not left:
            _remove_owned(request.get("remove"))
            dropped = _drop_run_groups(request.get("drop"))
            # One write when the tree ended with the program: one wake-up of the host, not two.
            _send(ctl, exit_report + (b"G\nE\n" if dropped else b"E\n"))
            os._exit(0)
        if killing_since is not None:
            _signal_all(_descendants(me), signal.SIGKILL, None)
        timeout = _IDLE_S
        if killing_since is not None:
            # Fast rounds first; a member the kernel will not kill (D state) must not cost a
            # core for as long as it stays.
            slow = time.monotonic() - killing_since > _KILL_FAST_FOR_S
            timeout = _KILL_SLOW_STEP_S if slow else _KILL_STEP_S
        readable, _, _ = select.select([ctl.fileno(), wake_r], [], [], timeout)
        if wake_r in readable:
            os.read(wake_r, 512)
        if ctl.fileno() in readable:
            try:
                commands = ctl.recv(64)
            except OSError:
                commands = b""
            if not commands:
                killing_since = killing_since or time.monotonic()  # the host is gone
            if b"T" in commands:
                _signal_all(_descendants(me), signal.SIGTERM, termed)
            if b"K" in commands:
                killing_since = killing_since or time.monotonic()


def _make_owned(path: object, files: object) -> None:
    """Create the request's owned directory and its read-only files (none asked: nothing)."""
    if files is None:
        return
    if not (isinstance(path, bytes) and os.path.isabs(path) and isinstance(files, dict)):
        raise TypeError("malformed request")
    os.mkdir(path, 0o700)  # fails if anything is there already: never someone else's dir
    try:
        for name, content in files.items():
            if not isinstance(name, bytes) or not isinstance(content, bytes) or b"/" in name:
                raise TypeError("malformed request")
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(os.path.join(path, name), flags, 0o400)
            try:
                view = memoryview(content)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise


def _drop_run_groups(dirs: object) -> bool:
    """Remove the run's cgroup directories the request names, deepest first (a nested dsh makes
    its own groups below); True only when all are gone. The kernel refuses to remove a group
    that still holds a process, so True also proves them empty."""
    if not isinstance(dirs, list) or not dirs:
        return False
    try:
        for group in reversed(dirs):
            if not isinstance(group, bytes):
                return False
            for parent, children, _ in os.walk(group, topdown=False):
                for child in children:
                    with contextlib.suppress(FileNotFoundError):
                        os.rmdir(os.path.join(parent, child))
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(group)
    except OSError:
        return False
    return True


def _remove_owned(path: object) -> None:
    """Remove the request's owned directory (the tree is gone: nothing below us can race it)."""
    if isinstance(path, bytes) and os.path.isabs(path):
        shutil.rmtree(path, ignore_errors=True)


def _recv_request(sock: socket.socket) -> tuple[dict[str, object], list[int]] | None:
    """One framed request and its descriptors; None at end of stream."""
    fds: list[int] = []
    msg, ancdata, _, _ = sock.recvmsg(_HEADER.size, socket.CMSG_SPACE(_MAX_FDS * 4))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds.extend(struct.unpack(f"{usable // 4}i", data[:usable]))
    while msg and len(msg) < _HEADER.size:
        more = sock.recv(_HEADER.size - len(msg))
        if not more:
            break
        msg += more
    if len(msg) < _HEADER.size:
        for fd in fds:
            os.close(fd)
        return None
    (size,) = _HEADER.unpack(msg)
    if size > _MAX_REQUEST:
        raise ValueError("request too large")
    payload = bytearray()
    while len(payload) < size:
        more = sock.recv(min(size - len(payload), 1 << 20))
        if not more:
            for fd in fds:
                os.close(fd)
            return None
        payload += more
    request = marshal.loads(bytes(payload))
    if not isinstance(request, dict):
        raise ValueError("malformed request")
    return request, fds


def _fork_supervisor(sock: socket.socket, ctl_fd: int, groups: object, make: object) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            sock.close()
            _supervise(socket.socket(fileno=ctl_fd), groups, make)
        finally:
            os._exit(0)
    os.close(ctl_fd)
    return pid


def _children(me: int) -> list[int]:
    """Direct children of this process (cheap where the kernel lists them, else one /proc pass)."""
    try:
        found: list[int] = []
        for tid in os.listdir(f"/proc/{me}/task"):
            with open(f"/proc/{me}/task/{tid}/children", "rb") as handle:
                found.extend(int(pid) for pid in handle.read().split())
        return found
    except (OSError, ValueError):
        return [pid for pid, _ in _descendants(me).items() if (_stat(pid) or (0, 0))[0] == me]


def _kill_adoptees(me: int, supervisors: set[int]) -> None:
    """Kill every child that is not a live supervisor, with its tree: a dead supervisor's tree."""
    adoptees = [pid for pid in _children(me) if pid not in supervisors]
    if not adoptees:
        return
    below = _descendants(me)
    doomed = {pid: below[pid] for pid in adoptees if pid in below}
    for pid in adoptees:
        doomed.update(_descendants(pid))
    _signal_all(doomed, signal.SIGKILL, None)


def _serve(sock: socket.socket) -> None:
    me = os.getpid()
    supervisors: set[int] = set()
    drain_until: float | None = None
    while True:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            supervisors.discard(pid)
        if drain_until is not None:
            _kill_adoptees(me, supervisors)
            if not _children(me) or time.monotonic() > drain_until:
                return
            time.sleep(0.02)
            continue
        readable, _, _ = select.select([sock], [], [], _IDLE_S)
        if not readable:
            # Adoptees appear only when a supervisor died with its tree still alive (a tool
            # killed it): checked while idle, never on the request path.
            _kill_adoptees(me, supervisors)
            continue
        try:
            received = _recv_request(sock)
        except (OSError, ValueError, EOFError, TypeError):
            received = None
        if received is None:
            drain_until = time.monotonic() + _DRAIN_LIMIT_S
            continue
        order, fds = received
        for fd in fds[1:]:
            os.close(fd)
        if not fds:
            continue
        try:
            supervisors.add(_fork_supervisor(sock, fds[0], order.get("cgroups"), order.get("make")))
        except OSError:
            os.close(fds[0])  # the host sees the socket close and spawns without a supervisor


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT):
        signal.signal(sig, _ignore)  # only the host's exit ends the spawner and its supervisors
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _subreaper()
    os.chdir("/")  # hold no directory of the host's busy; every request names its cwd
    gc.freeze()  # supervisors are forks: a collection would touch (and copy) every page
    sock = socket.socket(fileno=int(sys.argv[1]))
    _serve(sock)


if __name__ == "__main__":
    main()
