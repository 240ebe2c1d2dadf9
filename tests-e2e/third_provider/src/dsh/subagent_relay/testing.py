"""Test and demo helpers: the loopback model server and the test hooks.

``FakeRelayServer`` is Relay's model API on 127.0.0.1, scripted like every dsh fake model server;
``hermetic_env(root, base_url)`` is the env overlay for a keyless run against it.
``provider_with_program`` builds a provider that runs a stand-in program instead of the agent
(no config or profile reaches it); ``make_start_request(cwd, *texts)`` builds a start request.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dsh.subagent import ResolvedStartRequest
from dsh.subagent.testing import start_request
from dsh.subagent_relay._fake_server import (
    FAKE_API_KEY,
    Behaviour,
    FakeRelayServer,
    RecordedRequest,
    hermetic_env,
)
from dsh.subagent_relay._provider import RelayProvider
from dsh.subagent_relay.config import RelayProviderConfig

__all__ = [
    "FAKE_API_KEY",
    "Behaviour",
    "FakeRelayServer",
    "RecordedRequest",
    "hermetic_env",
    "make_start_request",
    "provider_with_program",
]


def provider_with_program(config: RelayProviderConfig, program: Sequence[str]) -> RelayProvider:
    """A provider whose agent is ``program`` (for example ``[sys.executable, "stand_in.py"]``)."""
    provider = RelayProvider(config)
    provider._program = tuple(program)
    return provider


def make_start_request(
    cwd: str | Path | None, *texts: str, provider: str = "relay"
) -> ResolvedStartRequest:
    """A ``ResolvedStartRequest`` for ``texts`` from a parent whose cwd is ``cwd``."""
    return start_request(cwd, *texts, provider=provider)
