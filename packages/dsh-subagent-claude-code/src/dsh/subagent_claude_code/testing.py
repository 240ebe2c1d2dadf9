"""Test and demo helpers shipped in the wheel.

``FakeMessagesServer`` is an Anthropic Messages API on 127.0.0.1; ``hermetic_env(root, base_url)``
is the env overlay for a keyless run of the real CLI against it. ``provider_with_cli`` builds a
provider that runs a scripted stand-in program instead of the bundled CLI: it exists for protocol
branches the real CLI cannot be made to produce, and no config or profile can reach it.
"""

from __future__ import annotations

from collections.abc import Sequence

from dsh.subagent_claude_code._fake_server import (
    Behaviour,
    FakeMessagesServer,
    RecordedRequest,
    hermetic_env,
)
from dsh.subagent_claude_code._provider import ClaudeCodeProvider
from dsh.subagent_claude_code.config import ClaudeCodeProviderConfig
from dsh.subprocess import SubprocessRuntime

__all__ = [
    "Behaviour",
    "FakeMessagesServer",
    "RecordedRequest",
    "hermetic_env",
    "provider_with_cli",
]


def provider_with_cli(
    config: ClaudeCodeProviderConfig,
    command: Sequence[str],
    *,
    runtime: SubprocessRuntime | None = None,
) -> ClaudeCodeProvider:
    """A provider whose CLI is ``command`` (for example ``[sys.executable, "stand_in.py"]``)."""
    provider = ClaudeCodeProvider(config, runtime=runtime)
    provider._cli_command = tuple(command)
    return provider
