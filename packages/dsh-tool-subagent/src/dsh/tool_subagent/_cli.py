"""The ``dsh`` command: ``run``, ``jobs``, ``profile check``, ``doctor`` (and lazily ``demo``,
``mcp``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from dsh.tool_subagent._cli_options import (
    add_common_options,
    configure_logging,
    guard_broken_pipe,
    positive_seconds,
)
from dsh.tool_subagent._version import __version__
from dsh.tool_subagent.errors import ProfileError

if TYPE_CHECKING:
    from dsh.jobs import JobSnapshot
    from dsh.tool_subagent._harness import Harness
    from dsh.tool_subagent._tool import Caller, SubagentTool

# Start-up (docs/performance.md): this module imports only what parsing the command line needs.
# Each command imports its own modules when it runs, so `dsh --version` and `--help` import
# neither pydantic nor the tool layer, and `dsh run` never imports the job stack's command,
# rich (unless stderr is a terminal), the MCP SDK or the doctor.

__all__ = ["build_parser", "main", "run_command"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_TIMEOUT, EXIT_INTERRUPTED = 0, 1, 2, 124, 130
_BACKGROUND_POLL_S = 3600.0
_JOBS_HELP = "list, read, stop and prune background jobs"
_PROFILE_HELP = "profile TOML file (default: every installed provider)"


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
    import asyncio

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


def _unknown_tool(tool_name: str, tools: Sequence[SubagentTool]) -> str:
    from dsh.subagent import installed_provider_kinds
    from dsh.tool_subagent._harness import default_tool_name
    from dsh.tool_subagent._known_providers import INSTALL_REQUIREMENTS

    names = ", ".join(t.name for t in tools) or "none"
    text = f'dsh run: no delegation tool named "{tool_name}" (tools: {names})'
    installed = installed_provider_kinds()
    for kind, requirement in INSTALL_REQUIREMENTS.items():
        if tool_name == default_tool_name(kind) and kind not in installed:
            text += (
                f'; the "{kind}" provider is not installed, install it with'
                f' pip install "{requirement}"'
            )
    return text


def _pick_tool(harness: Harness, tool_name: str | None, err: TextIO) -> SubagentTool | None:
    tools = harness.delegation_tools
    if tool_name is not None:
        chosen = [t for t in tools if t.name == tool_name]
        if not chosen:
            print(_unknown_tool(tool_name, tools), file=err)
            return None
        return chosen[0]
    if not tools:
        print("dsh run: the profile has no delegation tool", file=err)
        return None
    return tools[0]


def _print_auth_hint(tool: SubagentTool, failure_text: str, err: TextIO) -> None:
    from dsh.tool_subagent._auth_hint import auth_hint

    hint = auth_hint(tool.service.get(tool.config.provider), failure_text)
    if hint:
        print(hint, file=err)


def _write_answer(out: TextIO, text: str) -> None:
    # One rule for the foreground and --background: the answer ends with exactly one newline.
    out.write(text)
    if text and not text.endswith("\n"):
        out.write("\n")


async def _background(harness: Harness, job_id: str, caller: Caller) -> tuple[JobSnapshot, str]:
    snapshot = await harness.jobs.wait(job_id, _BACKGROUND_POLL_S, caller)
    while not snapshot.terminal:
        snapshot = await harness.jobs.wait(job_id, _BACKGROUND_POLL_S, caller)
    return snapshot, harness.jobs.read(job_id, caller)


async def _detach(
    harness: Harness,
    tool: SubagentTool,
    arguments: Mapping[str, Any],
    caller: Caller,
    as_json: bool,
    out: TextIO,
    err: TextIO,
) -> int:
    result = await tool.delegate(arguments, caller)
    if result.is_error or result.value is None:
        if as_json:
            out.write(json.dumps({"error": result.text}) + "\n")
        print(result.text, file=err)
        return EXIT_FAILED
    job_id = str(result.value["job_id"])
    # Let the job go: its detached process runs it and records the outcome.
    await harness.jobs.detach_owner(caller)
    if as_json:
        out.write(json.dumps({"job_id": job_id, "status": "running"}) + "\n")
    else:
        print(job_id, file=out)
        print(f"collect it with: dsh jobs output {job_id} --wait", file=err)
    return EXIT_OK


async def run_command(
    harness: Harness,
    task: str,
    *,
    tool_name: str | None = None,
    cwd: str | None = None,
    background: bool = False,
    detach: bool = False,
    as_json: bool = False,
    settings: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """One delegation through ``harness``; returns the exit code (the harness stays open).

    ``detach`` (a harness built with ``detach=True``) starts a background job in a detached
    dsh process, prints its id on stdout and returns at once, letting the job go on.

    ``as_json`` prints one :class:`~dsh.tool_subagent._run_report.RunReport` object on stdout
    instead of the answer (stdout) or the failure text (stderr). ``settings`` replace fields
    of the chosen tool's config for this run (``--stall-timeout``, ``--workspace``, …);
    ``options`` are per-delegation fields of its arguments model (docs/cli.md).
    """
    from dsh.tool_subagent import _run_report
    from dsh.tool_subagent._tool import Caller

    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    tool = _pick_tool(harness, tool_name, err)
    if tool is None:
        return EXIT_USAGE
    if settings:  # each value was checked as the command line was parsed
        tool.config = tool.config.model_copy(update=dict(settings))
    caller = Caller(session_id="dsh-cli", cwd=cwd)
    arguments = {
        **(options or {}),
        "description": _label(task),
        "prompt": task,
        "run_in_background": background or detach,
    }
    if detach:
        return await _detach(harness, tool, arguments, caller, as_json, out, err)
    began = time.monotonic()
    async with _status(tool.name, err):
        result = await tool.delegate(arguments, caller)
        if background and not result.is_error:
            from dsh.jobs import JobStatus

            assert result.value is not None
            job_id = str(result.value["job_id"])
            if not as_json:
                print(result.text, file=err)
            snapshot, output = await _background(harness, job_id, caller)
            code = EXIT_OK if snapshot.status is JobStatus.COMPLETED else EXIT_FAILED
            if as_json:
                elapsed = time.monotonic() - began
                _run_report.from_job(snapshot, output, elapsed, code).write_json(out)
            elif code == EXIT_OK:
                _write_answer(out, output)
            else:
                print(f"{output or '(no output)'}\n{snapshot.status_line}", file=err)
            if code != EXIT_OK:
                _print_auth_hint(tool, snapshot.status_line, err)
            return code
    code = EXIT_FAILED if result.is_error else EXIT_OK
    if as_json:
        elapsed = time.monotonic() - began
        _run_report.from_tool_result(result, elapsed, code).write_json(out)
    elif result.is_error:
        print(result.text, file=err)
    else:
        _write_answer(out, result.text)
    if result.is_error:
        _print_auth_hint(tool, result.text, err)
    return code


async def _run_main(args: argparse.Namespace) -> int:
    import asyncio

    from dsh.tool_subagent import _run_report
    from dsh.tool_subagent._arguments import DelegationArguments
    from dsh.tool_subagent._harness import Harness
    from dsh.tool_subagent._model_options import model_options
    from dsh.tool_subagent._tool import SubagentToolConfig

    task = sys.stdin.read() if args.task == "-" else args.task
    if not task.strip():
        print("dsh run: TASK is empty", file=sys.stderr)
        return EXIT_USAGE
    # Only the chosen tool (--tool, else the first) and its provider are built: another
    # product's modules are never imported.
    harness = Harness.from_profile(args.profile, detach=args.detach, tool=args.tool, one_tool=True)
    if args.background or args.detach:
        harness.open_job_store()  # an unusable store is refused before anything starts
    began = time.monotonic()
    limit = asyncio.timeout(args.timeout)
    try:
        async with harness, limit:
            return await run_command(
                harness,
                task,
                tool_name=args.tool,
                cwd=args.cwd,
                background=args.background,
                detach=args.detach,
                as_json=args.json,
                settings=model_options(args, SubagentToolConfig),
                options=model_options(args, DelegationArguments),
            )
    except TimeoutError:
        if not limit.expired():
            raise
        # The limit cancelled the call, and leaving `async with harness` closed every run
        # (whole-tree exit) before this line.
        report = _run_report.timed_out(args.timeout, time.monotonic() - began, EXIT_TIMEOUT)
        if args.json:
            report.write_json(sys.stdout)
        else:
            print(report.text, file=sys.stderr)
        return EXIT_TIMEOUT


_COMMANDS = ("run", "profile", "doctor", "demo", "jobs", "mcp")


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (no top-level option takes a command's name as its value)."""
    return next((word for word in argv if word in _COMMANDS), None)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``dsh`` parser. With ``command``, only that subcommand gets its options (the others
    are listed by name and help alone): the options of ``run`` come from pydantic models and
    those of ``jobs`` from the job stack, which ``dsh --version`` and ``--help`` do not need."""
    full = command is None
    parser = argparse.ArgumentParser(
        prog="dsh", description="Delegate tasks to coding-agent products."
    )
    parser.add_argument("--version", action="version", version=f"dsh {__version__}")
    add_common_options(parser, top_level=True)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one delegation")
    run.add_argument("--profile", metavar="PROFILE", help=_PROFILE_HELP)
    run.add_argument("--tool", help="delegation tool name (default: the first)")
    run.add_argument("--cwd", help="working directory for the subagent (default: current)")
    mode = run.add_mutually_exclusive_group()
    mode.add_argument(
        "--background", action="store_true", help="run as a background job and wait for it"
    )
    mode.add_argument(
        "--detach",
        action="store_true",
        help="start a background job in a detached process, print its id and return at once"
        " (collect it with dsh jobs output ID --wait)",
    )
    run.add_argument(
        "--timeout",
        type=positive_seconds,
        metavar="SECONDS",
        help="cancel the run after SECONDS (its process tree exits first), exit 124",
    )
    if full or command == "run":
        from dsh.tool_subagent._arguments import DelegationArguments
        from dsh.tool_subagent._model_options import add_model_options
        from dsh.tool_subagent._tool import SubagentToolConfig

        add_model_options(run, SubagentToolConfig)  # the tool's settings, for this run
        add_model_options(run, DelegationArguments)  # per-delegation options
    run.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    run.add_argument("task", metavar="TASK", help="the task text, or - to read stdin")
    profile = sub.add_parser("profile", help="profile tools")
    profile_sub = profile.add_subparsers(dest="profile_command", required=True)
    check = profile_sub.add_parser("check", help="print the composition as JSON; starts nothing")
    check.add_argument("profile", metavar="PROFILE", help="the profile TOML file to check")
    doctor_parser = sub.add_parser(
        "doctor", help="check installed providers and their bundled products"
    )
    doctor_parser.add_argument("--json", action="store_true", help="print one JSON object")
    doctor_parser.add_argument(
        "--profile", metavar="PROFILE", help="check this profile's provider instances"
    )
    demo = sub.add_parser("demo", help="run the embedded demo against loopback model servers")
    demo.add_argument(
        "--serve",
        action="store_true",
        help="start the loopback model servers, print a profile for them, serve until stopped",
    )
    demo.add_argument(
        "--executor",
        choices=("local", "ray"),
        help="where background jobs run, as the profile's [jobs] executor (default: local)",
    )
    demo.add_argument(
        "--address",
        help='the Ray cluster, as [jobs] address: "auto", "ray://HOST:PORT" or "HOST:PORT"',
    )
    demo.add_argument(
        "--max-runs-per-node",
        type=int,
        metavar="N",
        help="at most N jobs at once on each Ray node, as [jobs] max_runs_per_node",
    )
    if full or command == "jobs":
        from dsh.tool_subagent._jobs_command import add_jobs_parser

        add_jobs_parser(sub, add_common_options)
    else:
        sub.add_parser("jobs", help=_JOBS_HELP)
    mcp = sub.add_parser("mcp", help="serve the harness tools over MCP stdio")
    mcp.add_argument("--profile", metavar="PROFILE", help=_PROFILE_HELP)
    mcp.add_argument("--cwd", help="working directory for the subagents (default: current)")
    for subparser in (run, profile, check, doctor_parser, demo, mcp):
        add_common_options(subparser, top_level=False)
    return parser


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        import asyncio

        from dsh.tool_subagent._signals import exit_code_on_signal

        args.cwd = str(Path(args.cwd).absolute() if args.cwd else Path.cwd())
        try:
            return asyncio.run(exit_code_on_signal(lambda: _run_main(args)))
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
    if args.command == "jobs":
        from dsh.tool_subagent._jobs_command import jobs_main

        return jobs_main(args)
    from dsh.tool_subagent._harness import Harness

    if args.command == "profile":
        harness = Harness.from_profile(args.profile)
        print(json.dumps(harness.describe(), indent=2))
        return EXIT_OK
    if args.command == "doctor":
        from dsh.tool_subagent._doctor import doctor

        if args.profile is None:
            return doctor(as_json=args.json)
        subagents = Harness.from_profile(args.profile).subagents
        instances = [(name, subagents.get(name)) for name in subagents.names()]
        return doctor(instances=instances, as_json=args.json)
    if args.command == "demo":
        from dsh.tool_subagent._demo.command import main as demo

        return int(
            demo(
                serve=args.serve,
                executor=args.executor,
                address=args.address,
                max_runs_per_node=args.max_runs_per_node,
            )
        )
    if args.command == "mcp":
        from dsh.tool_subagent._mcp.command import main as serve_mcp

        return serve_mcp(profile=args.profile, cwd=args.cwd, exit_process=True)
    raise AssertionError(f"unknown command {args.command!r}")  # argparse allows no other


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(_command_of(words) or "")
    try:
        args = parser.parse_args(words)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    configure_logging(args, handler=args.command != "mcp")

    def body() -> int:
        try:
            return _dispatch(args)
        except ProfileError as exc:
            print(f"dsh: invalid profile: {exc}", file=sys.stderr)
            return EXIT_USAGE

    return guard_broken_pipe(body)


if __name__ == "__main__":
    raise SystemExit(main())
