"""Generate and check ``THIRD_PARTY_NOTICES.md`` from the installed runtime closure.

Repository tooling, not part of any distribution (no wheel ships it). Run from the workspace root::

    uv run python tools/third_party_notices.py --write
    uv run python tools/third_party_notices.py --check

The closure starts at the runtime requirements of the six dsh distributions (dsh-tool-subagent
with its ``codex``, ``claude-code``, ``mcp``, ``ray``, ``pydantic-ai``, ``openai-agents`` and
``langchain`` extras) and follows ``importlib.metadata``
requirements, honouring markers for the current environment and extras only where requested.
The dsh distributions themselves are walked but not listed. Declared terms are reported as the
metadata declares them; nothing is reclassified or guessed. This module spawns nothing.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

__all__ = [
    "NOTICES_FILE",
    "REGENERATE_COMMAND",
    "ROOTS",
    "Entry",
    "check",
    "closure",
    "main",
    "render",
]

NOTICES_FILE = "THIRD_PARTY_NOTICES.md"
REGENERATE_COMMAND = "uv run python tools/third_party_notices.py --write"

# (distribution, requested extras)
ROOTS: tuple[tuple[str, frozenset[str]], ...] = (
    ("dsh-subprocess", frozenset()),
    ("dsh-subagent", frozenset()),
    ("dsh-jobs", frozenset()),
    (
        "dsh-tool-subagent",
        frozenset(
            {"codex", "claude-code", "mcp", "ray", "pydantic-ai", "openai-agents", "langchain"}
        ),
    ),
    ("dsh-subagent-codex", frozenset()),
    ("dsh-subagent-claude-code", frozenset()),
)

_OWN_PREFIX = "dsh-"
_SHORT_LICENSE_CHARS = 100
_URL = re.compile(r"<?\b[a-zA-Z][a-zA-Z0-9+.-]*://\S*>?")
_NOT_DECLARED = "not declared"

# Bundled product executables: distribution -> (product label, top-level package dir).
# The line states what the package declares and never claims that those terms cover the
# executables: declared terms are reported, never reclassified.
_BUNDLED: dict[str, tuple[str, str]] = {
    "openai-codex-cli-bin": ("native Codex CLI", "codex_cli_bin/"),
    "claude-agent-sdk": ("bundled Claude Code CLI", "claude_agent_sdk/_bundled/"),
}


def normalize(name: str) -> str:
    """PEP 503 normalized distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _clean(text: str) -> str:
    """One line, no URLs, collapsed whitespace."""
    return " ".join(_URL.sub("", text).split())


@dataclass(frozen=True)
class Entry:
    """One listed distribution."""

    name: str
    version: str
    license: str
    bundled: str | None


def closure() -> dict[str, frozenset[str]]:
    """Normalized names of the runtime closure (dsh-* included) mapped to requested extras."""
    seen: dict[str, frozenset[str]] = {}
    pending: list[tuple[str, frozenset[str]]] = list(ROOTS)
    while pending:
        name, extras = pending.pop()
        key = normalize(name)
        before = seen.get(key)
        if before is not None and extras <= before:
            continue
        merged = extras | (before or frozenset())
        seen[key] = merged
        for raw in metadata.distribution(key).requires or ():
            req = Requirement(raw)
            if req.marker is not None:
                envs = [{"extra": e} for e in sorted(merged)] or [{"extra": ""}]
                if not any(req.marker.evaluate(env) for env in envs):
                    continue
            pending.append((req.name, frozenset(req.extras)))
    return seen


def _field(meta: metadata.PackageMetadata, name: str) -> str | None:
    values = meta.get_all(name) or []
    return str(values[0]) if values else None


def _declared_license(dist: metadata.Distribution) -> str:
    meta = dist.metadata
    expression = _field(meta, "License-Expression")
    if expression and expression.strip():
        return _clean(expression)
    field = _field(meta, "License")
    if field and field.strip() and "\n" not in field.strip():
        cleaned = _clean(field)
        if cleaned and len(cleaned) <= _SHORT_LICENSE_CHARS and cleaned.upper() != "UNKNOWN":
            return cleaned
    classifiers = sorted(
        c.removeprefix("License :: ")
        for c in meta.get_all("Classifier") or ()
        if c.startswith("License :: ")
    )
    if classifiers:
        return "; ".join(_clean(c) for c in classifiers) + " (classifier)"
    return _NOT_DECLARED


def _license_files(dist: metadata.Distribution) -> list[str]:
    names = {
        Path(str(f)).name
        for f in dist.files or ()
        if ".dist-info/" in str(f).replace("\\", "/") and "licenses" in str(f).lower()
    }
    return sorted(names)


def _license_file_heading(dist: metadata.Distribution, name: str) -> str:
    for f in dist.files or ():
        if Path(str(f)).name == name and ".dist-info/" in str(f).replace("\\", "/"):
            text = f.read_text(encoding="utf-8")
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            return _clean(" ".join(lines[:2]))
    return ""


def _bundled_line(dist: metadata.Distribution, key: str, declared: str) -> str | None:
    spec = _BUNDLED.get(key)
    if spec is None:
        return None
    label, prefix = spec
    files = sorted(
        Path(str(f)).name
        for f in dist.files or ()
        if str(f).startswith(prefix) and "." not in Path(str(f)).name
    )
    shipped = ", ".join(f"`{n}`" for n in files) or "none found"
    lic_files = _license_files(dist)
    if lic_files:
        quoted = "; ".join(f"{n} (begins: “{_license_file_heading(dist, n)}”)" for n in lic_files)
        files_note = f"license files in its metadata: {quoted}"
    else:
        files_note = "no license files in its metadata"
    return (
        f"{label} (executables shipped: {shipped}): the package declares no separate terms "
        f"for the executables; the terms the package declares: {declared}; {files_note}."
    )


def entries() -> list[Entry]:
    """Listed distributions, sorted by normalized name."""
    out: list[Entry] = []
    for key in sorted(closure()):
        if key.startswith(_OWN_PREFIX):
            continue
        dist = metadata.distribution(key)
        declared = _declared_license(dist)
        out.append(
            Entry(
                name=normalize(dist.metadata["Name"]),
                version=_clean(dist.version),
                license=declared,
                bundled=_bundled_line(dist, key, declared),
            )
        )
    return out


def render(items: list[Entry] | None = None) -> str:
    """The full notices document."""
    rows = entries() if items is None else items
    lines = [
        "# Third-party notices",
        "",
        "This file is generated from the installed runtime closure's package metadata of the dsh",
        "distributions (dsh-tool-subagent with its codex, claude-code, mcp and ray extras and its",
        "pydantic-ai, openai-agents and langchain adapter extras). Do not edit it by hand;",
        "regenerate it from the workspace root with:",
        "",
        f"    {REGENERATE_COMMAND}",
        "",
        "Each entry gives the name, the installed version and the declared terms: the",
        "License-Expression field, else a short License field, else the License classifiers",
        "(marked 'classifier'), else 'not declared'. Declared terms are not reclassified.",
        "",
    ]
    for e in rows:
        lines.append(f"- **{e.name}** {e.version}: {e.license}")
        if e.bundled is not None:
            lines.append(f"  - {e.bundled}")
    return "\n".join(lines) + "\n"


def check(committed: str, expected: str | None = None) -> str | None:
    """None when ``committed`` matches; otherwise a short message naming the command."""
    want = render() if expected is None else expected
    if committed == want:
        return None
    return f"{NOTICES_FILE} is out of date; regenerate it with: {REGENERATE_COMMAND}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/third_party_notices.py")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    parser.add_argument("--output", type=Path, default=Path.cwd(), help="workspace root")
    args = parser.parse_args(argv)
    target: Path = args.output / NOTICES_FILE
    if args.write:
        target.write_text(render(), encoding="utf-8", newline="\n")
        return 0
    committed = target.read_text(encoding="utf-8") if target.exists() else ""
    problem = check(committed)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
