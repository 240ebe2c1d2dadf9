"""dsh.subagent_codex: the Codex app-server provider for ``dsh.subagent``.

``CodexProvider`` (entry point ``codex``) runs the pinned ``openai-codex-cli-bin`` binary as
``codex app-server --listen stdio://`` per one-shot run. Loopback fixtures for keyless runs live in
``dsh.subagent_codex.testing``.
"""

from importlib import metadata as _metadata

from dsh.subagent_codex._provider import CodexProvider
from dsh.subagent_codex._run import CodexRun
from dsh.subagent_codex.config import CODEX_CREDENTIAL_ENV, CodexProviderConfig, PermissionMode

try:
    __version__ = _metadata.version("dsh-subagent-codex")
except _metadata.PackageNotFoundError:  # imported from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "CODEX_CREDENTIAL_ENV",
    "CodexProvider",
    "CodexProviderConfig",
    "CodexRun",
    "PermissionMode",
]
