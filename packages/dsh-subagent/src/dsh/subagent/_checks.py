"""The pre-spawn request checks every product provider runs, in the order subagent.md fixes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from dsh.subagent._types import ResolvedStartRequest, TextBlock
from dsh.subagent.errors import ProductFailure

__all__ = ["check_one_shot_request"]


def check_one_shot_request(
    request: ResolvedStartRequest,
    *,
    prefix: str,
    unusable_cwd: Callable[[], ProductFailure],
) -> tuple[str, tuple[str, ...]]:
    """Return ``(cwd, texts)`` for a valid one-shot request, or raise its safe rejection.

    1. The parent has a cwd (``<prefix>: no working directory for the child — …``).
    2. The cwd is absolute and an enterable directory; otherwise ``unusable_cwd()`` is raised
       (the product's own stage line) with the path only on ``__cause__``.
    3. Only text blocks, each valid Unicode (no unpaired surrogate: Codex cannot deserialize the
       ``turn/start`` carrying one and never answers it, so both providers refuse it alike), and
       not blank overall.

    The directory check is a few ``stat`` calls, cheap enough for the event loop.
    """
    cwd = request.parent.cwd
    if not cwd:
        raise ProductFailure(
            f"{prefix}: no working directory for the child — delegate from a parent session "
            "that has one"
        )
    path = Path(cwd)
    if not (path.is_absolute() and path.is_dir() and os.access(path, os.X_OK)):
        raise unusable_cwd() from NotADirectoryError(cwd)
    texts: list[str] = []
    for index, block in enumerate(request.prompt):
        if not isinstance(block, TextBlock) or block.type != "text":
            raise ProductFailure(f"{prefix}: the one-shot task must contain only text blocks")
        if not _is_unicode_text(block.text):
            raise ProductFailure(
                f"{prefix}: the one-shot task must be valid Unicode text"
                f" (prompt[{index}] holds an unpaired surrogate)"
            )
        texts.append(block.text)
    if not "".join(texts).strip():
        raise ProductFailure(f"{prefix}: the one-shot task must not be empty")
    return cwd, tuple(texts)


def _is_unicode_text(text: str) -> bool:
    """False for a str with an unpaired surrogate (the only str that UTF-8 cannot encode)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
