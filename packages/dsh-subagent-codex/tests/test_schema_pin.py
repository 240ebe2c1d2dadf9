"""The pinned Codex's own protocol schema agrees with every table the provider relies on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import codex_cli_bin
import pytest

from dsh.subagent_codex._mapping import (
    ANSWERED_REQUESTS,
    MODE_FIELDS,
    OBJECT_VARIANTS,
    OPT_OUT_NOTIFICATIONS,
    STRING_VARIANTS,
)
from dsh.subprocess import SpawnSpec, default_runtime

pytestmark = pytest.mark.real_product


_CACHE: list[tuple[dict[str, Any], dict[str, Any]]] = []


@pytest.fixture
async def schema(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    if _CACHE:  # generated once per session by the first test that asks
        return _CACHE[0]
    out = tmp_path_factory.mktemp("schema")
    argv = [str(codex_cli_bin.bundled_codex_path()), "app-server", "generate-json-schema"]
    spec = SpawnSpec(argv=[*argv, "--out", str(out)], stdout="ignore", stderr="ignore")
    proc = await default_runtime().spawn(spec)
    try:
        outcome = await proc.wait()
    finally:
        await proc.aclose()
    assert outcome.exit_code == 0
    full = json.loads((out / "codex_app_server_protocol.schemas.json").read_text())
    v2 = json.loads((out / "codex_app_server_protocol.v2.schemas.json").read_text())
    _CACHE.append((full["definitions"], v2["definitions"]))
    return _CACHE[0]


def _methods(union: dict[str, Any]) -> set[str]:
    return {m for branch in union["oneOf"] for m in branch["properties"]["method"]["enum"]}


def _enum(definition: dict[str, Any]) -> set[str]:
    values: set[str] = set()
    for branch in definition.get("oneOf", definition.get("anyOf", [definition])):
        values.update(v for v in branch.get("enum", []) if isinstance(v, str))
    return values


async def test_thread_start_model_is_optional_and_our_fields_exist(schema: Any) -> None:
    _, v2 = schema
    params = v2["ThreadStartParams"]
    assert "model" in params["properties"]
    assert "model" not in params.get("required", [])
    sent = {"cwd", "ephemeral", "model"} | {k for f in MODE_FIELDS.values() for k in f}
    assert sent <= set(params["properties"])
    assert set(params.get("required", [])) <= sent
    policies = {f["approvalPolicy"] for f in MODE_FIELDS.values()}
    assert policies <= _enum(v2["AskForApproval"])
    sandboxes = {f["sandbox"] for f in MODE_FIELDS.values() if "sandbox" in f}
    assert sandboxes <= _enum(v2["SandboxMode"])
    assert "auto_review" in _enum(v2["ApprovalsReviewer"])


async def test_initialize_turn_and_interrupt_fields_exist(schema: Any) -> None:
    full, v2 = schema
    assert {"clientInfo", "capabilities"} <= set(full["InitializeParams"]["properties"])
    assert {"name", "title", "version"} <= set(full["ClientInfo"]["properties"])
    caps = full["InitializeCapabilities"]["properties"]
    assert {"experimentalApi", "optOutNotificationMethods"} <= set(caps)
    turn = v2["TurnStartParams"]
    assert {"threadId", "input"} <= set(turn["properties"])
    (text_input,) = [b for b in v2["UserInput"]["oneOf"] if b.get("title") == "TextUserInput"]
    assert {"type", "text", "text_elements"} <= set(text_input["properties"])
    assert set(v2["TurnInterruptParams"]["required"]) == {"threadId", "turnId"}


async def test_codex_error_info_variants_are_exactly_our_table(schema: Any) -> None:
    _, v2 = schema
    strings: set[str] = set()
    objects: set[str] = set()
    open_ended = 0
    for branch in v2["CodexErrorInfo"]["anyOf"]:
        if "enum" in branch:
            strings.update(branch["enum"])
        elif "required" in branch:
            (key,) = branch["required"]
            assert branch["additionalProperties"] is False
            objects.add(key)
        else:  # the forward-compatible catch-all; the provider maps it to "unknown"
            assert branch == {"type": ["string", "object"]}
            open_ended += 1
    assert open_ended <= 1
    assert strings == STRING_VARIANTS
    assert objects == OBJECT_VARIANTS
    assert len(strings) == 15
    assert len(objects) == 5


async def test_answered_requests_and_read_notifications_exist(schema: Any) -> None:
    full, _ = schema
    requests = _methods(full["ServerRequest"])
    assert set(ANSWERED_REQUESTS) <= requests
    notifications = _methods(full["ServerNotification"])
    assert {"item/completed", "turn/completed", "error", "turn/started"} <= notifications
    assert set(OPT_OUT_NOTIFICATIONS) <= notifications
    for name in ("CommandExecutionApprovalDecision", "FileChangeApprovalDecision"):
        assert {"decline", "cancel"} <= _enum(full[name]), name


def test_schema_is_generated_by_the_pinned_binary() -> None:
    assert Path(codex_cli_bin.bundled_codex_path()).is_file()
