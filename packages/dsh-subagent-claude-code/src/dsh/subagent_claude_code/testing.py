"""Test and demo helpers shipped in the wheel.

``FakeMessagesServer`` is an Anthropic Messages API on 127.0.0.1, scripted like every dsh fake
model server (``dsh.subagent.testing.ScriptedModelServer``); ``hermetic_env(root, base_url)``
is the env overlay for a keyless run of the real CLI against it. ``provider_with_program`` (also
``provider_with_cli``) builds a provider that runs a scripted stand-in program instead of the
bundled CLI: it exists for protocol branches the real CLI cannot be made to produce, and no config
or profile can reach it. ``make_start_request(cwd, *texts)`` builds a start request. Those two
are the test hooks both product providers' ``testing`` modules offer under the same names.
``SAMPLE_USAGE`` is a server ``usage`` and ``SAMPLE_USAGE_FACTS`` the usage facts it becomes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dsh.subagent import ResolvedStartRequest
from dsh.subagent.testing import start_request
from dsh.subagent_claude_code._fake_server import (
    Behaviour,
    FakeMessagesServer,
    RecordedRequest,
    hermetic_env,
    host_tmp,
)
from dsh.subagent_claude_code._provider import ClaudeCodeProvider
from dsh.subagent_claude_code.config import ClaudeCodeProviderConfig
from dsh.subprocess import SubprocessRuntime

__all__ = [
    "SAMPLE_USAGE",
    "SAMPLE_USAGE_FACTS",
    "Behaviour",
    "FakeMessagesServer",
    "RecordedRequest",
    "hermetic_env",
    "host_tmp",
    "make_start_request",
    "provider_with_cli",
    "provider_with_program",
]

#: A Messages API ``usage`` object for ``FakeMessagesServer.usage``: numbers chosen apart (and
#: small, so the CLI's own cost stays tiny), so a swapped or dropped field shows in a test that
#: compares the run's usage facts with them.
SAMPLE_USAGE = {
    "input_tokens": 11,
    "output_tokens": 7,
    "cache_read_input_tokens": 13,
    "cache_creation_input_tokens": 17,
}
#: What one model request reporting :data:`SAMPLE_USAGE` becomes in a run's usage facts as JSON
#: (``context_window`` and ``cost_usd`` left out: the CLI picks them for its model).
SAMPLE_USAGE_FACTS = {
    "input_tokens": 11,
    "cached_input_tokens": 13,
    "cache_creation_input_tokens": 17,
    "output_tokens": 7,
    "model_requests": 1,
}


def provider_with_program(
    config: ClaudeCodeProviderConfig,
    program: Sequence[str],
    *,
    runtime: SubprocessRuntime | None = None,
) -> ClaudeCodeProvider:
    """A provider whose CLI is ``program`` (for example ``[sys.executable, "stand_in.py"]``)."""
    provider = ClaudeCodeProvider(config, runtime=runtime)
    provider._cli_command = tuple(program)
    return provider


#: The older name of ``provider_with_program``.
provider_with_cli = provider_with_program


def make_start_request(
    cwd: str | Path | None, *texts: str, provider: str = "claude-code"
) -> ResolvedStartRequest:
    """A ``ResolvedStartRequest`` for ``texts`` from a parent whose cwd is ``cwd``."""
    return start_request(cwd, *texts, provider=provider)
