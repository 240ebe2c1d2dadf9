"""Loopback fixtures for keyless real-Codex runs (used by tests, ``dsh demo`` and benchmarks).

- ``FakeResponsesServer``: an OpenAI Responses API on 127.0.0.1, scripted like every dsh fake
  model server (``dsh.subagent.testing.ScriptedModelServer``).
- ``write_codex_home(dir, base_url, model)``: a hermetic ``CODEX_HOME/config.toml``.
- ``hermetic_env(home)``: the env overlay a provider needs to use that home.
- ``make_start_request(cwd, *texts)`` and ``provider_with_program(config, program)``: the test
  hooks both product providers' ``testing`` modules offer under the same names.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dsh.subagent_codex._fake_server import (
    Behaviour,
    Drop,
    FakeResponsesServer,
    FunctionCallItem,
    HttpStatus,
    MessageItem,
    OutputItem,
    RecordedRequest,
    Reply,
    ResponseFailed,
    Stall,
    Trickle,
)
from dsh.subagent_codex._hermetic_home import (
    FAKE_API_KEY,
    FAKE_KEY_ENV,
    hermetic_env,
    write_codex_home,
)
from dsh.subagent_codex._provider import CodexProvider
from dsh.subagent_codex._wire import MAX_LINE_BYTES
from dsh.subagent_codex.config import CodexProviderConfig

__all__ = [
    "FAKE_API_KEY",
    "FAKE_KEY_ENV",
    "SAMPLE_USAGE",
    "SAMPLE_USAGE_FACTS",
    "Behaviour",
    "Drop",
    "FakeResponsesServer",
    "FunctionCallItem",
    "HttpStatus",
    "MessageItem",
    "OutputItem",
    "RecordedRequest",
    "Reply",
    "ResponseFailed",
    "Stall",
    "Trickle",
    "hermetic_env",
    "make_start_request",
    "provider_with_program",
    "write_codex_home",
]

#: A Responses API ``usage`` object for ``FakeResponsesServer.usage``: numbers chosen apart, so a
#: swapped or dropped field shows in a test that compares the run's usage facts with them.
SAMPLE_USAGE = {
    "input_tokens": 1000,
    "input_tokens_details": {"cached_tokens": 200},
    "output_tokens": 30,
    "output_tokens_details": {"reasoning_tokens": 7},
    "total_tokens": 1030,
}
#: What one model response reporting :data:`SAMPLE_USAGE` becomes in a run's usage facts as JSON
#: (``context_window`` left out: the product picks it).
SAMPLE_USAGE_FACTS = {
    "input_tokens": 1000,
    "cached_input_tokens": 200,
    "output_tokens": 30,
    "reasoning_output_tokens": 7,
    "total_tokens": 1030,
    "model_requests": 1,
}


def make_start_request(cwd: str | Path | None, *texts: str, provider: str = "codex") -> Any:
    """A ``ResolvedStartRequest`` for ``texts`` from a parent whose cwd is ``cwd``."""
    from dsh.subagent.testing import start_request

    return start_request(cwd, *texts, provider=provider)


def provider_with_program(
    config: CodexProviderConfig, program: Sequence[str], *, max_line_bytes: int = MAX_LINE_BYTES
) -> CodexProvider:
    """A provider that runs ``program app-server --listen stdio://`` instead of the pinned binary.

    For protocol branches the real app-server cannot be made to produce (scripted stand-ins);
    ``max_line_bytes`` lowers the stdout line bound. No config or profile can reach either.
    """
    return CodexProvider(config, _program=program, _max_line_bytes=max_line_bytes)
