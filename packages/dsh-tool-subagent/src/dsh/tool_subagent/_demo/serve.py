"""``dsh demo --serve``: the loopback model servers, and a profile for them, until stopped.

It lets anyone try ``dsh run --profile`` or ``dsh mcp --profile`` against the real products with
no key and no code: each installed provider's demo plan (``dsh.subagent.DemoPlan.serve``) brings
a server that answers every request with the plan's ``serve_answer``. The profile (TOML) is
printed on stdout and also written next to the hermetic homes, under one temporary directory
that is removed on the way out. Ctrl-C, SIGTERM and SIGHUP stop it cleanly (exit 0): they are
its normal way to end.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from dsh.tool_subagent._demo.plans import InstalledPlan

__all__ = ["END_OF_PROFILE", "serve", "to_toml"]

#: The profile's last line (a TOML comment), so a reader knows the profile is complete.
END_OF_PROFILE = "# end of profile: the servers stay up until Ctrl-C, SIGTERM or SIGHUP"
_BARE_KEY = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def _key(name: str) -> str:
    return name if name and set(name) <= _BARE_KEY else json.dumps(name)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def _lines(data: Mapping[str, Any], path: tuple[str, ...]) -> list[str]:
    lines = [
        f"{_key(k)} = {_value(v)}"
        for k, v in data.items()
        if not isinstance(v, Mapping) and not _is_table_array(v)
    ]
    for name, value in data.items():
        here = ".".join(_key(part) for part in (*path, name))
        if isinstance(value, Mapping):
            lines += ["", f"[{here}]", *_lines(value, (*path, name))]
        elif _is_table_array(value):
            for item in value:
                lines += ["", f"[[{here}]]", *_lines(item, (*path, name))]
    return lines


def to_toml(data: Mapping[str, Any]) -> str:
    """Profile-shaped data (tables, arrays of tables, strings, numbers, booleans) as TOML."""
    return "\n".join(_lines(data, ())).lstrip("\n") + "\n"


async def serve(
    plans: Sequence[InstalledPlan],
    out: TextIO | None = None,
    err: TextIO | None = None,
    *,
    jobs: Mapping[str, Any] | None = None,
) -> int:
    """Serve until cancelled; the servers stop and the directory goes before this returns.

    ``jobs`` is the printed profile's ``[jobs]`` table (``dsh demo --serve --executor ray``).
    """
    from dsh.tool_subagent._demo.plans import demo_profile

    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    root = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="dsh-demo-serve-"))
    try:
        async with AsyncExitStack() as stack:
            configs = [(p.kind, await stack.enter_async_context(p.plan.serve(root))) for p in plans]
            text = to_toml(demo_profile(configs, jobs))
            text += END_OF_PROFILE + "\n"
            path = root / "profile.toml"
            path.write_text(text, encoding="utf-8")
            out.write(text)
            out.flush()
            print(
                f"dsh demo --serve: loopback models up; the profile above is also in {path}."
                f' Try: dsh run --profile {path} "hello". Ctrl-C stops.',
                file=err,
                flush=True,
            )
            await asyncio.Event().wait()
    finally:
        await asyncio.to_thread(shutil.rmtree, root, ignore_errors=True)
    return 0  # pragma: no cover - the wait above only ends by cancellation
