"""Run one ``dsh`` command in this process and report what its start-up imported.

Run: ``DSH_STARTUP_REPORT=FILE python probe.py run|mcp|version [dsh arguments...]``.

- ``run``: ``dsh run`` up to the moment it spawns its first process through ``dsh.subprocess``
  (the product, or the supervisor that starts it): that spawn is replaced by the report and the
  process ends there, so no product starts.
- ``mcp``: ``dsh mcp``, serving as usual; SIGUSR1 writes the report and ends the process (the
  caller sends it once ``tools/list`` is answered).
- ``version``: ``dsh --version`` to its end.
- ``floor``: no dsh at all: import the libraries a start imported (the names in the file that
  ``DSH_STARTUP_MODULES`` gives, less dsh's and the products' packages) and build one pydantic
  model, as dsh's first one pays pydantic's schema machinery and its plugin scan. What a start
  costs beyond this is dsh's own code (the benchmark's start-up mode prints both).

The report is one JSON object written to FILE: ``elapsed_s`` (from the first line of this
script, after the interpreter started, to the spawn, the signal or the end) and ``modules`` (the
sorted names in ``sys.modules`` at that moment). Used by the import check
(tests-e2e/test_startup_imports.py) and the benchmark's start-up mode
(tests-e2e/benchmarks/startup.py).
"""

from __future__ import annotations

import time

_STARTED = time.perf_counter()

import json  # noqa: E402 - the clock starts first
import os  # noqa: E402
import sys  # noqa: E402
from typing import Any, NoReturn  # noqa: E402


def _report(what: str) -> NoReturn:
    elapsed = time.perf_counter() - _STARTED
    line = json.dumps({"event": what, "elapsed_s": elapsed, "modules": sorted(sys.modules)})
    with open(os.environ["DSH_STARTUP_REPORT"], "w", encoding="utf-8") as report:  # noqa: PTH123
        report.write(line + "\n")
    os._exit(0)


def _intercept_spawn() -> None:
    """Replace the runtime's spawn with the report, without importing anything more than
    ``dsh.subprocess`` itself (which ``dsh run`` imports to spawn anyway): the hook waits for
    the module to be imported by dsh."""
    import importlib.abc
    import importlib.machinery

    target = "dsh.subprocess._runtime"

    def patch(module: Any) -> None:
        async def spawn(self: Any, spec: Any) -> NoReturn:
            _report("spawn")

        module.SubprocessRuntime.spawn = spawn

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any, target_module: Any = None) -> Any:
            if name != target:
                return None
            sys.meta_path.remove(self)
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None:
                return spec
            loader = spec.loader
            exec_module = loader.exec_module

            def run(module: Any) -> None:
                exec_module(module)
                patch(module)

            loader.exec_module = run  # type: ignore[method-assign]
            return spec

    sys.meta_path.insert(0, Finder())


#: Packages a start imports that are dsh's own or a product's, not libraries dsh builds on.
_NOT_LIBRARIES = ("__main__", "dsh", "codex_cli_bin", "claude_agent_sdk")


def _import_libraries(listing: str) -> None:
    import importlib

    with open(listing, encoding="utf-8") as names:  # noqa: PTH123
        modules = json.load(names)
    for name in modules:
        if name.split(".")[0] in _NOT_LIBRARIES:
            continue
        try:
            importlib.import_module(name)
        except Exception:  # a platform's private module fails alone; the rest counts
            continue
    from pydantic import BaseModel, ConfigDict, Field

    class Floor(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid")
        name: str = Field(default="floor", min_length=1)
        limit: int | None = Field(default=None, ge=1)

    Floor.model_validate({"name": "x"})


def main() -> NoReturn:
    command, *rest = sys.argv[1:]
    from_cli: Any
    if command == "version":
        from dsh.tool_subagent._cli import main as from_cli

        from_cli(["--version"])
        _report("version")
    if command == "mcp":
        import signal

        signal.signal(signal.SIGUSR1, lambda signum, frame: _report("signal"))
        from dsh.tool_subagent._cli import main as from_cli

        code = from_cli(["mcp", *rest])
        sys.stderr.write(f"probe: dsh mcp returned {code} before the signal\n")
        os._exit(2)
    if command == "floor":
        _import_libraries(os.environ["DSH_STARTUP_MODULES"])
        _report("floor")
    if command == "run":
        _intercept_spawn()
        from dsh.tool_subagent._cli import main as from_cli

        code = from_cli(["run", *rest])
        sys.stderr.write(f"probe: dsh run returned {code} without spawning\n")
        os._exit(2)
    sys.stderr.write(f"probe: unknown command {command!r}\n")
    os._exit(2)


if __name__ == "__main__":
    main()
