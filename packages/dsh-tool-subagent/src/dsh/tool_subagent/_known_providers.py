"""The provider kinds this distribution knows how to install, and loading with their hints.

The seam (``dsh.subagent``) names no product: the extras of ``dsh-tool-subagent`` are this
package's own, so the table of kinds, products and extras lives here. It words the install
hints of ``load_provider`` errors and of ``dsh demo``, and orders the demo's products.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from dsh.subagent import SubagentProvider
from dsh.subagent import load_provider as _load_provider

__all__ = ["INSTALL_REQUIREMENTS", "KNOWN_PROVIDERS", "KnownProvider", "load_provider"]


class KnownProvider(NamedTuple):
    """A provider kind, the product it runs, the extra of dsh-tool-subagent installing it, the
    provider's package (whose ``testing`` module the cross-product tests use), and the model
    vendor behind the product (its spans' ``gen_ai.provider.name``)."""

    kind: str
    product: str
    extra: str
    package: str
    vendor: str


#: In the demo's order (its table lists Codex first).
KNOWN_PROVIDERS = (
    KnownProvider("codex", "Codex", "codex", "dsh.subagent_codex", "openai"),
    KnownProvider(
        "claude-code", "Claude Code", "claude-code", "dsh.subagent_claude_code", "anthropic"
    ),
)
INSTALL_REQUIREMENTS = {p.kind: f"dsh-tool-subagent[{p.extra}]" for p in KNOWN_PROVIDERS}


def load_provider(kind: str, config: Mapping[str, Any] | None = None) -> SubagentProvider:
    """:func:`dsh.subagent.load_provider` with this distribution's install hints."""
    return _load_provider(kind, config, install_requirements=INSTALL_REQUIREMENTS)
