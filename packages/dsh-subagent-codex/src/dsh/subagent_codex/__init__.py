"""dsh.subagent_codex: the Codex app-server provider for ``dsh.subagent``.

``CodexProvider`` (entry point ``codex``) runs the pinned ``openai-codex-cli-bin`` binary as
``codex app-server --listen stdio://`` per one-shot run. Loopback fixtures for keyless runs live in
``dsh.subagent_codex.testing``.
"""

from dsh.subagent_codex._provider import CodexProvider
from dsh.subagent_codex._run import CodexRun
from dsh.subagent_codex.config import CODEX_CREDENTIAL_ENV, CodexProviderConfig, PermissionMode
from dsh.subprocess.lazy import package_getattr as _package_getattr

# __version__ is read when asked for (dsh.subprocess.lazy).
__getattr__ = _package_getattr(__name__, distribution="dsh-subagent-codex")

__all__ = [
    "CODEX_CREDENTIAL_ENV",
    "CodexProvider",
    "CodexProviderConfig",
    "CodexRun",
    "PermissionMode",
]
