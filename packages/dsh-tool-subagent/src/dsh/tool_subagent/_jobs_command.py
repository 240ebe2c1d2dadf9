"""``dsh jobs``: the OS user's job store, read and steered from the terminal.

``list``, ``show``, ``output``, ``kill`` and ``prune`` work on every record of the store the
profile names (the default store without ``--profile``), whoever started it: a detached run, a
``dsh mcp`` session, a Python host. The store is the user's own file, so ``dsh jobs`` sees every
owner; a model, through the job tools, sees only its own. A live record whose process is gone
is settled ``failed`` as it is read, and the leftover product processes of dead hosts are reaped.

Exit codes: 0 done (``output``: the job completed; ``kill``: it is stopped or had finished),
1 the job failed or was killed (``output``), 2 usage error, unknown id or unusable store,
3 the job is still running (``output`` without ``--wait``), 124 a ``--wait`` or ``kill`` timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from dsh.jobs import (
    JobRecord,
    JobsConfig,
    JobStatus,
    JobStore,
    RecordFilter,
    SqliteJobStore,
    status_line,
    store_for,
)
from dsh.jobs.errors import JobStoreError

__all__ = ["EXIT_RUNNING", "add_jobs_parser", "jobs_main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_RUNNING, EXIT_TIMEOUT = 0, 1, 2, 3, 124
#: ``dsh jobs list`` shows this many records unless ``--all`` or ``--limit``.
FIRST_PAGE = 20
DEFAULT_KILL_TIMEOUT_S = 30.0
_POLL_S = 0.2
_AGE = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_STATUSES = [str(s) for s in JobStatus]


def _age(text: str) -> float:
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not an age like 30m, 2h or 7d")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def add_jobs_parser(sub: Any, common: Any) -> None:
    """The ``jobs`` subcommand and its verbs, on the ``dsh`` parser's subparsers ``sub``."""
    jobs = sub.add_parser("jobs", help="list, read, stop and prune background jobs")  # = _cli
    verbs = jobs.add_subparsers(dest="jobs_command", required=True)

    def verb(name: str, help_text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = verbs.add_parser(name, help=help_text)
        parser.add_argument("--profile", metavar="PROFILE", help="the profile whose [jobs] store")
        parser.add_argument("--json", action="store_true", help="print JSON on stdout")
        common(parser, top_level=False)
        return parser

    listing = verb("list", "jobs, newest first")
    listing.add_argument("--status", choices=_STATUSES, action="append", help="only this status")
    listing.add_argument("--since", type=_age, metavar="AGE", help="started within AGE (2h, 7d)")
    listing.add_argument("--limit", type=int, default=FIRST_PAGE, help="at most this many")
    listing.add_argument("--all", action="store_true", help="every record (no limit)")
    verb("show", "one job's status, times and usage").add_argument("job_id", metavar="ID")
    output = verb("output", "one job's output")
    output.add_argument("job_id", metavar="ID")
    output.add_argument("--wait", action="store_true", help="wait for the job to finish")
    output.add_argument("--timeout", type=_seconds, metavar="SECONDS", help="bound --wait")
    kill = verb("kill", "stop a job; returns once its processes have exited")
    kill.add_argument("job_id", metavar="ID")
    kill.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_KILL_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long to wait for it to stop (default {DEFAULT_KILL_TIMEOUT_S:g})",
    )
    verb("prune", "drop finished jobs past retention and shrink the file")


def _config(profile: str | None) -> JobsConfig:
    if profile is None:
        return JobsConfig()
    from dsh.tool_subagent._harness import jobs_config, read_profile

    return jobs_config(read_profile(profile))


def _when(stamp: float | None) -> str | None:
    if stamp is None:
        return None
    return datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds")


def _as_json(record: JobRecord, *, output: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {
        "job_id": record.id,
        "kind": record.kind,
        "label": record.label,
        "owner": record.owner,
        "status": str(record.status),
        "detail": record.detail,
        "started_at": _when(record.started_at),
        "finished_at": _when(record.finished_at),
        "where": record.where,
        "holder_pid": record.holder.pid if not record.terminal else None,
    }
    meta = dict(record.meta or {})
    data["usage"] = meta.get("usage")
    data["timings"] = meta.get("timings")
    data["workspace"] = meta.get("workspace")
    data["structured_output"] = meta.get("structured_output")
    data["queue"] = meta.get("queue")
    if output:
        data["output"] = record.output
    return data


def _reap_if(corrected: bool) -> None:
    """A record was settled because its holder is gone: end what that holder left running,
    then finish the worktrees it left (their changes onto their branches)."""
    if corrected:
        from dsh.subprocess import reap_orphans
        from dsh.tool_subagent._worktree import sweep_lost_worktrees

        reap_orphans()
        asyncio.run(sweep_lost_worktrees())


def _read(store: JobStore, job_id: str) -> tuple[JobRecord | None, bool]:
    record = store.get(job_id)
    if record is None:
        return None, False
    fixed = store.correct([record])[0]
    return fixed, fixed is not record


def _elapsed(record: JobRecord) -> str:
    end = record.finished_at if record.finished_at is not None else time.time()
    return f"{end - record.started_at:.1f}s"


def _list(store: JobStore, args: argparse.Namespace, out: TextIO) -> int:
    since = time.time() - args.since if args.since is not None else None
    where = RecordFilter(statuses=args.status, since=since)
    limit = 1 << 30 if args.all else max(1, args.limit)
    records = store.newest(where, limit)
    fixed = store.correct(records)
    _reap_if(any(a is not b for a, b in zip(records, fixed, strict=True)))
    total = store.count(where)
    if args.json:
        listed = [_as_json(r) for r in fixed]
        out.write(json.dumps({"jobs": listed, "total": total}, ensure_ascii=False) + "\n")
        return EXIT_OK
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"dsh jobs ({len(fixed)} of {total})")
    for column in ("id", "status", "label", "owner", "started", "took"):
        table.add_column(column)
    for r in fixed:
        status = str(r.status) + (f" ({r.detail})" if r.detail else "")
        started = _when(r.started_at) or ""
        row = (r.id, status, r.label, r.owner or "-", started, _elapsed(r))
        table.add_row(*(escape(cell) for cell in row))
    Console(file=out).print(table)
    return EXIT_OK


def _show(record: JobRecord, args: argparse.Namespace, out: TextIO) -> int:
    data = _as_json(record)
    if args.json:
        out.write(json.dumps(data, ensure_ascii=False) + "\n")
        return EXIT_OK
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"dsh job {record.id}", show_header=False)
    table.add_column("field")
    table.add_column("value")
    for key, value in data.items():
        if value is None:
            continue
        text = json.dumps(value) if isinstance(value, dict | list) else str(value)
        table.add_row(key, escape(text))
    Console(file=out).print(table)
    return EXIT_OK


def _wait(store: JobStore, record: JobRecord, timeout_s: float | None) -> JobRecord:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while not record.terminal and (deadline is None or time.monotonic() < deadline):
        time.sleep(_POLL_S if deadline is None else min(_POLL_S, deadline - time.monotonic()))
        fresh, corrected = _read(store, record.id)
        _reap_if(corrected)
        if fresh is None:  # a live record is never pruned; someone removed the file's rows
            break
        record = fresh
    return record


def _output(store: JobStore, record: JobRecord, args: argparse.Namespace, out: TextIO) -> int:
    if args.wait:
        record = _wait(store, record, args.timeout)
    if record.terminal and not record.reported:
        store.update(record.id, {"reported": True})
    if not record.terminal:
        code = EXIT_TIMEOUT if args.wait else EXIT_RUNNING
    else:
        code = EXIT_OK if record.status is JobStatus.COMPLETED else EXIT_FAILED
    if args.json:
        data = _as_json(record, output=True)
        data["exit_code"] = code
        out.write(json.dumps(data, ensure_ascii=False) + "\n")
        return code
    if record.status is JobStatus.COMPLETED:
        out.write(record.output)
        if record.output and not record.output.endswith("\n"):
            out.write("\n")
    else:
        text = record.output or "(no output)"
        print(f"{text}\n{status_line(record.status, record.detail)}", file=sys.stderr)
    return code


def _kill(store: JobStore, record: JobRecord, args: argparse.Namespace, out: TextIO) -> int:
    was_live = not record.terminal
    if was_live:
        store.update(record.id, {"kill_requested": True, "reported": True})
        store.flush()
        record = _wait(store, record, args.timeout)
    code = EXIT_OK if record.terminal else EXIT_TIMEOUT
    if args.json:
        data = _as_json(record)
        data["result"] = "requested" if was_live else "already-finished"
        out.write(json.dumps(data, ensure_ascii=False) + "\n")
        return code
    line = status_line(record.status, record.detail)
    if not was_live:
        print(f"job {record.id} had already finished {line}", file=out)
    elif record.terminal:
        print(f"stopped job {record.id} {line}", file=out)
    else:
        print(f"job {record.id} is still stopping after {args.timeout:g} s", file=sys.stderr)
    return code


def _prune(store: JobStore, args: argparse.Namespace, out: TextIO) -> int:
    removed = store.prune()
    size = None
    if isinstance(store, SqliteJobStore):
        store.vacuum()
        size = Path(store.file).stat().st_size
    if args.json:
        out.write(json.dumps({"removed": removed, "file_bytes": size}) + "\n")
    else:
        kept = store.count(RecordFilter())
        tail = f"; the file is {size} bytes" if size is not None else ""
        print(f"removed {removed} finished jobs; {kept} kept{tail}", file=out)
    return EXIT_OK


def jobs_main(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run one ``dsh jobs`` verb; returns the exit code."""
    stream = out if out is not None else sys.stdout
    config = _config(args.profile)
    try:
        store = store_for(config)
    except JobStoreError as exc:
        print(f"dsh jobs: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        verb = args.jobs_command
        if verb == "list":
            return _list(store, args, stream)
        if verb == "prune":
            return _prune(store, args, stream)
        record, corrected = _read(store, args.job_id)
        _reap_if(corrected)
        if record is None:
            print(f"dsh jobs: unknown job {args.job_id}", file=sys.stderr)
            return EXIT_USAGE
        if verb == "show":
            return _show(record, args, stream)
        if verb == "output":
            return _output(store, record, args, stream)
        return _kill(store, record, args, stream)
    finally:
        store.close()
