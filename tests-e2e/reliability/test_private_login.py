"""A private Codex run authenticates with only a forwarded key (issues 22 and 24).

The template's ``config.toml`` keeps Codex's built-in ``openai`` provider and points its base URL
at the loopback server (``openai_base_url``). The key is a canary in the ambient
``OPENAI_API_KEY``, forwarded by the default ``credential_env``. Codex 0.163.0 does not send an
env key as the built-in provider's bearer (docs/product-facts.md); the startup step (issue 22)
logs it in with ``account/login/start`` into the private process's in-memory store. The loopback
server must see it as the bearer. While the run is open no file of its private home holds it (the
home is there: Codex wrote its state into it); afterwards the private home is gone and no file
written since the test began (under the temporary directory, the test's own directories and the
ambient ``HOME``) holds it.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent import StopReason
from dsh.subagent_codex import CodexProvider, CodexProviderConfig

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(180)]


def _files_holding(roots: list[Path], needle: bytes, since: float) -> list[str]:
    """Regular files under ``roots`` modified since ``since`` whose bytes contain ``needle``."""
    found = []
    for root in roots:
        for dirpath, _dirs, files in os.walk(root, onerror=lambda _e: None):
            for name in files:
                path = Path(dirpath) / name
                try:
                    if path.is_symlink() or path.stat().st_mtime < since:
                        continue
                    if needle in path.read_bytes():
                        found.append(str(path))
                except OSError:
                    continue
    return found


def _own_private_dirs() -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"dsh-codex-{os.getpid()}-*"))


async def test_a_private_codex_run_logs_in_only_the_forwarded_key(
    codex: Any, kit: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = time.time() - 1
    key = f"sk-CANARY-{uuid.uuid4().hex}"
    host_home = tmp_path / "host-home"
    host_home.mkdir()
    monkeypatch.setenv("HOME", str(host_home))
    monkeypatch.setenv("OPENAI_API_KEY", key)
    for name in ("CODEX_API_KEY", "CODEX_HOME", "CODEX_SQLITE_HOME"):
        monkeypatch.delenv(name, raising=False)
    template = tmp_path / "template"
    template.mkdir()
    base_url = json.dumps(codex.server.base_url)
    (template / "config.toml").write_text(
        f'model = "mock-model"\nopenai_base_url = {base_url}\n'
        "[features]\nplugins = false\nunbounded_connection_retries = false\n"
    )
    codex.server.queue_text("LOGGED-IN", phase="final_answer")
    config = CodexProviderConfig(
        isolation="private",
        home_template=str(template),
        env={"RUST_LOG": "error", "CODEX_APP_SERVER_DISABLE_MANAGED_CONFIG": "1"},
        dispose_grace_ms=1500,
        stderr="discard",
    )
    async with await CodexProvider(config).start(codex.request("who am I?")) as run:
        [private] = await asyncio.to_thread(_own_private_dirs)
        result = await run.result()
        state = private / "sqlite" / "state_5.sqlite"
        assert await asyncio.to_thread(state.is_file), "Codex used its private home"
        assert await asyncio.to_thread(_files_holding, [private], key.encode(), 0) == []
    assert result.stop_reason is StopReason.COMPLETED, result.diagnostic
    model_calls = [r for r in codex.server.requests if r.method == "POST"]
    assert model_calls
    assert all(r.headers.get("authorization") == f"Bearer {key}" for r in model_calls)
    assert not await asyncio.to_thread(private.exists), "the private home is gone"
    roots = [Path(tempfile.gettempdir()), tmp_path, host_home]
    assert await asyncio.to_thread(_files_holding, roots, key.encode(), started) == []
