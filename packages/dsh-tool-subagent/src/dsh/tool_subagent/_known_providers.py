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
    """One product provider this distribution ships: the one table every per-product list is
    generated from or checked against (``tools/product_table.py``: the import contracts, the
    install matrix; the OpenTelemetry vendor names; the demo; the docs' provider pages).

    ``kind``: the provider kind (profile ``kind``); ``product``: the product's display name;
    ``extra``: the dsh-tool-subagent extra installing it; ``package`` / ``distribution``: the
    provider's import package and distribution; ``vendor``: the model vendor behind the product
    (spans' ``gen_ai.provider.name``); ``product_module`` / ``product_distribution``: the
    product's own package, which only its provider may import; ``pulls_mcp``: whether installing
    the product pulls the ``mcp`` SDK (so ``dsh mcp`` serves without the ``mcp`` extra).
    """

    kind: str
    product: str
    extra: str
    package: str
    vendor: str
    distribution: str
    product_module: str
    product_distribution: str
    pulls_mcp: bool


#: In the demo's order (its table lists Codex first).
KNOWN_PROVIDERS = (
    KnownProvider(
        kind="codex",
        product="Codex",
        extra="codex",
        package="dsh.subagent_codex",
        vendor="openai",
        distribution="dsh-subagent-codex",
        product_module="codex_cli_bin",
        product_distribution="openai-codex-cli-bin",
        pulls_mcp=False,
    ),
    KnownProvider(
        kind="claude-code",
        product="Claude Code",
        extra="claude-code",
        package="dsh.subagent_claude_code",
        vendor="anthropic",
        distribution="dsh-subagent-claude-code",
        product_module="claude_agent_sdk",
        product_distribution="claude-agent-sdk",
        pulls_mcp=True,
    ),
)
INSTALL_REQUIREMENTS = {p.kind: f"dsh-tool-subagent[{p.extra}]" for p in KNOWN_PROVIDERS}


def load_provider(kind: str, config: Mapping[str, Any] | None = None) -> SubagentProvider:
    """:func:`dsh.subagent.load_provider` with this distribution's install hints."""
    return _load_provider(kind, config, install_requirements=INSTALL_REQUIREMENTS)
