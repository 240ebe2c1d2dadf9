"""The ``dsh`` command: ``run``, ``profile check``, ``doctor`` (and lazily ``demo``, ``mcp``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from dsh.jobs import JobStatus
from dsh.tool_subagent._doctor import doctor
from dsh.tool_subagent._harness import Harness
from dsh.tool_subagent._tool import Caller, SubagentTool
from dsh.tool_subagent.errors import ProfileError

__all__ = ["build_parser", "main", "run_command"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
_BACKGROUND_POLL_S = 3600.0


def _label(task: str) -> str:
    words = task.split()[:5]
    label = " ".join(words)[:60]
    return label or "dsh run"


@contextlib.asynccontextmanager
async def _status(tool_name: str, stream: TextIO) -> AsyncIterator[None]:
    """A rich status line with the tool name and elapsed time, only when stderr is a terminal."""
    if not stream.isatty():
        yield
        return
    from rich.console import Console

    console = Console(file=stream)
    started = time.monotonic()
    with console.status(f"{tool_name}: running (0s)") as status:

        async def tick() -> None:
            while True:
                await asyncio.sleep(0.5)
                status.update(f"{tool_name}: running ({time.monotonic() - started:.0f}s)")

        ticker = asyncio.create_task(tick())
        try:
            yield
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)


async def run_command(
    harness: Harness,
    task: str,
    *,
    tool_name: str | None = None,
    cwd: str | None = None,
    background: bool = False,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """One delegation through ``harness``; returns the exit code (the harness stays open)."""
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    tools = harness.delegation_tools
    if tool_name is not None:
        chosen = [t for t in tools if t.name == tool_name]
        if not chosen:
            names = ", ".join(t.name for t in tools) or "none"
            print(f'dsh run: no delegation tool named "{tool_name}" (tools: {names})', file=err)
            return EXIT_USAGE
        tool: SubagentTool = chosen[0]
    elif tools:
        tool = tools[0]
    else:
        print("dsh run: the profile has no delegation tool", file=err)
        return EXIT_USAGE
    caller = Caller(session_id="dsh-cli", cwd=cwd)
    arguments: dict[str, Any] = {"description": _label(task), "prompt": task}
    if background:
        arguments["run_in_background"] = True
    async with _status(tool.name, err):
        result = await tool.call(arguments, caller)
        if background and not result.is_error:
            assert result.value is not None
            job_id = str(result.value["job_id"])
            print(result.text, file=err)
            snapshot = await harness.jobs.wait(job_id, _BACKGROUND_POLL_S, caller)
            while not snapshot.terminal:
                snapshot = await harness.jobs.wait(job_id, _BACKGROUND_POLL_S, caller)
            output = harness.jobs.read(job_id, caller)
            if snapshot.status is JobStatus.COMPLETED:
                out.write(output)
                return EXIT_OK
            print(f"{output or '(no output)'}\n{snapshot.status_line}", file=err)
            return EXIT_FAILED
    if result.is_error:
        print(result.text, file=err)
        return EXIT_FAILED
    out.write(result.text)
    if result.text and not result.text.endswith("\n"):
        out.write("\n")
    return EXIT_OK


async def _run_main(args: argparse.Namespace) -> int:
    task = sys.stdin.read() if args.task == "-" else args.task
    if not task.strip():
        print("dsh run: TASK is empty", file=sys.stderr)
        return EXIT_USAGE
    async with Harness.from_profile(args.profile) as harness:
        return await run_command(
            harness, task, tool_name=args.tool, cwd=args.cwd, background=args.background
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsh", description="Delegate tasks to coding-agent products."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one delegation")
    run.add_argument("--profile", help="profile TOML (default: every installed provider)")
    run.add_argument("--tool", help="delegation tool name (default: the first)")
    run.add_argument("--cwd", help="working directory for the subagent (default: current)")
    run.add_argument("--background", action="store_true", help="run as a background job")
    run.add_argument("task", metavar="TASK", help="the task text, or - to read stdin")
    profile = sub.add_parser("profile", help="profile tools")
    profile_sub = profile.add_subparsers(dest="profile_command", required=True)
    check = profile_sub.add_parser("check", help="print the composition as JSON; starts nothing")
    check.add_argument("profile", metavar="P")
    sub.add_parser("doctor", help="check installed providers and their bundled products")
    sub.add_parser("demo", help="run the embedded demo against loopback model servers")
    mcp = sub.add_parser("mcp", help="serve the harness tools over MCP stdio")
    mcp.add_argument("--profile", help="profile TOML (default: every installed provider)")
    mcp.add_argument("--cwd", help="working directory for the subagents (default: current)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    try:
        if args.command == "run":
            args.cwd = str(Path(args.cwd).absolute() if args.cwd else Path.cwd())
            try:
                return asyncio.run(_run_main(args))
            except KeyboardInterrupt:
                return EXIT_INTERRUPTED
        if args.command == "profile":
            harness = Harness.from_profile(args.profile)
            print(json.dumps(harness.describe(), indent=2))
            return EXIT_OK
        if args.command == "doctor":
            return doctor()
        if args.command == "demo":
            from dsh.tool_subagent import _demo

            return int(_demo.main())
        if args.command == "mcp":
            from dsh.tool_subagent import _mcp

            return _mcp.main(profile=args.profile, cwd=args.cwd, exit_process=True)
    except ProfileError as exc:
        print(f"dsh: invalid profile: {exc}", file=sys.stderr)
        return EXIT_USAGE
    parser.error("unknown command")
    return EXIT_USAGE  # pragma: no cover


if __name__ == "__main__":
    raise SystemExit(main())
