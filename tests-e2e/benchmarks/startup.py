"""The start-up benchmark: how soon ``dsh`` is ready, against the targets of issue 42.

Run: ``uv run python tests-e2e/benchmarks/startup.py [--runs N] [--json OUT]``.

Each figure is the median of ``--runs`` (7) fresh starts, after one unrecorded start per case
(it writes the bytecode caches an installed dsh has; ``PYTHONDONTWRITEBYTECODE`` is dropped
from the children's environment). Every start goes through ``tests-e2e/startup/probe.py``
(``drive.py`` spawns it with a plain ``subprocess.Popen``):

- ``dsh --version``: the spawn to the process's end (target 100 ms).
- ``dsh run`` (Codex, a fake key, no model is called): dsh's own time, the interpreter's start to
  the first spawn through ``dsh.subprocess`` (the product's supervisor; target 150 ms), and the
  wall time from the spawn of the interpreter.
- the libraries' floor under ``dsh run``: the libraries its start imported (pydantic, asyncio, the
  standard library), imported in a fresh interpreter with no dsh, and one pydantic model built;
  ``dsh run``'s own time less this is what dsh's code costs (``run_dsh_share_ms``).
- ``dsh mcp`` (a Codex-only profile): ``initialize`` answered (target 200 ms) and ``tools/list``
  answered (target 250 ms), from the spawn, through raw JSON-RPC over stdio.

The exit code is 0 whether or not a target is met (the machine may be shared); ``--json``
writes every sample.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

_DRIVE = Path(__file__).resolve().parent.parent / "startup" / "drive.py"
TARGETS_MS = {
    "version_ms": 100.0,
    "run_own_ms": 150.0,
    "mcp_initialize_ms": 200.0,
    "mcp_tools_ms": 250.0,
}


def _drive() -> Any:
    spec = importlib.util.spec_from_file_location("dsh_startup_drive", _DRIVE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(
        HOME=str(home),
        CODEX_HOME=str(home),
        XDG_STATE_HOME=str(home / "state"),
        OPENAI_API_KEY="sk-fake-startup-benchmark",
    )
    return env


def measure(runs: int) -> dict[str, Any]:
    drive = _drive()
    extra = ("run_wall_ms", "run_floor_ms", "run_dsh_share_ms")
    samples: dict[str, list[float]] = {key: [] for key in (*TARGETS_MS, *extra)}
    with tempfile.TemporaryDirectory(prefix="dsh-startup-bench-") as scratch:
        home = Path(scratch) / "home"
        home.mkdir()
        profile = Path(scratch) / "codex.toml"
        profile.write_text('[[provider]]\nkind = "codex"\n', encoding="utf-8")
        env = _env(home)
        run_args = ["--tool", "subagent_codex", "--cwd", scratch, "Say hello."]
        mcp_args = ["--profile", str(profile), "--cwd", scratch]
        for index in range(runs + 1):
            version = drive.start_up("version", [], env=env)
            run = drive.start_up("run", run_args, env=env)
            mcp = drive.start_up("mcp", mcp_args, env=env)
            floor = drive.library_floor(run, env=env)
            if index == 0:
                continue  # the warm-up: bytecode caches, the page cache
            samples["version_ms"].append(version.wall_s * 1000)
            samples["run_own_ms"].append(run.elapsed_s * 1000)
            samples["run_wall_ms"].append(run.wall_s * 1000)
            samples["run_floor_ms"].append(floor.elapsed_s * 1000)
            samples["run_dsh_share_ms"].append((run.elapsed_s - floor.elapsed_s) * 1000)
            samples["mcp_initialize_ms"].append(mcp.initialize_s * 1000)
            samples["mcp_tools_ms"].append(mcp.tools_s * 1000)
    medians = {key: statistics.median(values) for key, values in samples.items()}
    return {
        "runs": runs,
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
        "medians_ms": medians,
        "targets_ms": TARGETS_MS,
        "met": {key: medians[key] <= target for key, target in TARGETS_MS.items()},
        "samples_ms": samples,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=7, help="recorded starts per case (7)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the report as JSON")
    args = parser.parse_args()
    report = measure(args.runs)
    load = ", ".join(f"{value:.2f}" for value in report["load_average"])
    print(f"dsh start-up, median of {args.runs} (load average {load}, {report['cpus']} CPUs)")
    for key, value in report["medians_ms"].items():
        target = TARGETS_MS.get(key)
        verdict = "" if target is None else f" target <= {target:.0f} ms: "
        verdict += "" if target is None else ("met" if report["met"][key] else "NOT met")
        print(f"  {key:<18} {value:8.1f} ms{verdict}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
