from __future__ import annotations

import json
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.subprocess import (
    AGENT_SOCKET_NAMES,
    CORE_ENV_NAMES,
    SCRUB_EXEMPT_NAMES,
    TRACE_CONTEXT_ENV,
    TREE_MARKER_ENV,
    Collect,
    EnvForwarding,
    SpawnSpec,
    SubprocessRuntime,
    build_child_env,
    is_credential_env,
    policy_overlay,
    scrubbed_parent_env,
    spawn_trace_context,
)

AMBIENT = ["X_TOKEN", "X_PASSWORD", "X_API_KEY", "DSH_FOO", "dsh_lower", "MONKEY_X"]
DUMP = "import json, os; print(json.dumps(dict(os.environ)))"


def test_scrub_pure() -> None:
    env = dict.fromkeys(AMBIENT, "v") | {"PATH": "/bin", "CODEX_HOME": "/c", "TERM": "xterm"}
    assert scrubbed_parent_env(env) == {"PATH": "/bin", "CODEX_HOME": "/c", "TERM": "xterm"}
    merged = build_child_env({"DSH_X": "1", "PATH": None, "OPENAI_API_KEY": "k"}, environ=env)
    assert merged == {"CODEX_HOME": "/c", "TERM": "xterm", "DSH_X": "1", "OPENAI_API_KEY": "k"}


LEAKED = {
    "MYSQL_PWD": "pw",
    "DATABASE_URL": "postgres://u:pw@h/db",
    "DOCKER_AUTH_CONFIG": '{"auths": {}}',
    "CI_JOB_JWT": "x",
    "GOOGLE_CREDENTIALS": "{}",
    "AWS_SESSION_CREDENTIALS_X": "x",
    "PLAIN_LOOKING": "https://ghp_abc@github.com/o/r.git",
    "SIGNED": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
    "PEM": "-----BEGIN OPENSSH PRIVATE KEY-----\nabc",
    "DB_PASSWD": "pw",
    "GPG_PASSPHRASE": "pw",
    "GH_PAT": "ghp",
    # Agent sockets sign with every loaded key: a credential (forwarded only by name).
    "SSH_AUTH_SOCK": "/run/user/1/ssh.sock",
    "GPG_AGENT_INFO": "/run/user/1/gnupg/S.gpg-agent:0:1",
    # Exporter and request headers carry API keys in values no value pattern knows.
    "OTEL_EXPORTER_OTLP_HEADERS": "x-honeycomb-team=abc123",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "api-key=abc123",
    "ANTHROPIC_CUSTOM_HEADERS": "X-Api-Key: abc123",
}
KEPT = {
    "PWD": "/w",
    "OLDPWD": "/",
    "GIT_AUTHOR_NAME": "A",
    "HTTPS_PROXY": "http://proxy:3128",
    "DOCS_URL": "https://example.org/a:b@c",
    "PYTHONPATH": "/p",
    "PATH_EXTRA": "/q",
    # The OpenTelemetry settings that hold no secret stay for the products.
    "OTEL_SERVICE_NAME": "svc",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
    "OTEL_RESOURCE_ATTRIBUTES": "team=a",
    "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
    "HEADERLESS_MODE": "1",
}


def test_credential_names_and_values_are_scrubbed_and_the_shell_names_kept() -> None:
    assert scrubbed_parent_env(LEAKED | KEPT) == KEPT


_NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
_SECRET_PART = st.sampled_from(
    ["KEY", "token", "Secret", "PASSWORD", "passwd", "CREDENTIALS", "JWT", "AUTH", "COOKIE"]
)
_USERINFO = st.from_regex(r"[a-z0-9]{0,6}:[a-zA-Z0-9%]{1,10}", fullmatch=True)


@given(_NAME, _SECRET_PART, _NAME, st.text(max_size=20))
def test_a_name_with_a_credential_part_is_always_removed(
    head: str, part: str, tail: str, value: str
) -> None:
    name = f"{head}{part}{tail}"
    assert name not in scrubbed_parent_env({name: value, "PATH": "/bin"})


@given(_NAME, st.sampled_from(["postgres", "mysql", "redis", "https", "amqp"]), _USERINFO)
def test_a_url_with_a_password_is_removed_whatever_its_name(
    name: str, scheme: str, userinfo: str
) -> None:
    value = f"{scheme}://{userinfo}@db.internal:5432/app"
    assert is_credential_env(name, value)
    assert name not in scrubbed_parent_env({name: value})


@given(st.dictionaries(_NAME, st.text(max_size=30), max_size=8))
def test_the_scrub_only_removes_names_and_never_invents_or_alters_values(
    environ: dict[str, str],
) -> None:
    scrubbed = scrubbed_parent_env(environ)
    assert scrubbed.items() <= environ.items()
    for name, value in environ.items():
        if not is_credential_env(name, value) and not name.upper().startswith("DSH_"):
            assert scrubbed[name] == value


@given(st.dictionaries(_NAME, st.text(max_size=10), max_size=8), st.sets(_NAME, max_size=3))
def test_core_keeps_only_the_allow_list_and_keep_names(
    environ: dict[str, str], keep: set[str]
) -> None:
    env = build_child_env({"GIVEN_X": "1"}, environ=environ, policy="core", keep=keep)
    allowed = CORE_ENV_NAMES | keep | {"GIVEN_X"}
    assert all(name in allowed or name.startswith("LC_") for name in env)
    assert set(env) <= set(scrubbed_parent_env(environ)) | {"GIVEN_X"}


def test_core_policy_pure() -> None:
    ambient = LEAKED | KEPT | {"PATH": "/bin", "LC_ALL": "C", "CODEX_HOME": "/c", "OTHER": "x"}
    assert build_child_env(environ=ambient, policy="core", keep=["CODEX_HOME"]) == {
        "PATH": "/bin",
        "LC_ALL": "C",
        "CODEX_HOME": "/c",
        "HTTPS_PROXY": "http://proxy:3128",
    }
    assert policy_overlay("scrub", environ=ambient) == {}
    assert set(policy_overlay("core", environ=ambient)) >= {"OTHER", "PWD"}
    with pytest.raises(ValueError, match="env policy"):
        policy_overlay("everything", environ=ambient)  # type: ignore[arg-type]
    assert {"PWD", "OLDPWD"} <= SCRUB_EXEMPT_NAMES
    assert not AGENT_SOCKET_NAMES & SCRUB_EXEMPT_NAMES


def test_agent_sockets_are_credentials_forwarded_only_by_name() -> None:
    ambient = {"SSH_AUTH_SOCK": "/run/user/1/ssh.sock", "GPG_AGENT_INFO": "/g:0:1", "PATH": "/b"}
    assert set(AGENT_SOCKET_NAMES) == {"SSH_AUTH_SOCK", "GPG_AGENT_INFO"}
    assert all(is_credential_env(name, value) for name, value in ambient.items() if name != "PATH")
    assert build_child_env(environ=ambient) == {"PATH": "/b"}
    forwarding = EnvForwarding(forward=("SSH_AUTH_SOCK",))
    child = build_child_env(forwarding.overlay(ambient), environ=ambient)
    assert child == {"PATH": "/b", "SSH_AUTH_SOCK": "/run/user/1/ssh.sock"}


def test_env_forwarding_overlay_names_and_hidden_names() -> None:
    ambient = {"A_KEY": "k", "PLAIN": "p", "OTHER": "o", "PATH": "/bin"}
    plan = EnvForwarding(
        policy="core",
        forward=("A_KEY", "PLAIN", "UNSET_NAME"),
        env={"DB": "postgres://u:pw@h/db", "RUST_LOG": "x"},
        tool_visible=("PLAIN",),
    )
    assert plan.overlay(ambient) == {
        "OTHER": None,
        "A_KEY": "k",
        "PLAIN": "p",
        "DB": "postgres://u:pw@h/db",
        "RUST_LOG": "x",
    }
    assert plan.names(ambient) == ("A_KEY", "DB", "PLAIN", "RUST_LOG")
    assert plan.credential_names(ambient) == ["A_KEY", "DB", "PLAIN"]
    assert plan.hidden() == ["A_KEY", "DB", "UNSET_NAME"]


async def _child_env(runtime: SubprocessRuntime, overlay: dict[str, str | None]) -> dict[str, str]:
    proc = await runtime.spawn(
        SpawnSpec([sys.executable, "-c", DUMP], env=overlay, stdout=Collect(1 << 20))
    )
    assert (await proc.wait()).exit_code == 0
    await proc.aclose()
    result: dict[str, str] = json.loads(proc.collected("stdout").text)
    return result


async def test_ambient_secrets_never_reach_child(
    runtime: SubprocessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in AMBIENT:
        monkeypatch.setenv(name, "ambient-value")
    monkeypatch.setenv(TREE_MARKER_ENV, "1:2:inherited")
    env = await _child_env(runtime, {})
    assert not set(AMBIENT) & set(env)
    assert "PATH" in env
    assert env[TREE_MARKER_ENV] != "1:2:inherited"


async def test_explicit_overlay_reaches_child(
    runtime: SubprocessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in AMBIENT:
        monkeypatch.setenv(name, "ambient-value")
    env = await _child_env(runtime, {name: f"given-{name}" for name in AMBIENT})
    assert {name: env[name] for name in AMBIENT} == {name: f"given-{name}" for name in AMBIENT}


async def test_none_overlay_removes_name(
    runtime: SubprocessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLAIN_NAME", "x")
    assert "PLAIN_NAME" in await _child_env(runtime, {})
    assert "PLAIN_NAME" not in await _child_env(runtime, {"PLAIN_NAME": None})


async def test_widened_scrub_and_core_tombstones_reach_a_real_child(
    runtime: SubprocessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in (LEAKED | KEPT).items():
        monkeypatch.setenv(name, value)
    env = await _child_env(runtime, {})
    assert not set(LEAKED) & set(env)
    assert {name: env[name] for name in KEPT if name != "PWD"} == {
        name: value for name, value in KEPT.items() if name != "PWD"
    }
    core = await _child_env(runtime, {**policy_overlay("core"), "GIVEN_X": "1"})
    assert {"GIVEN_X", "PATH", TREE_MARKER_ENV} <= set(core)
    assert not {"SSH_AUTH_SOCK", "GIT_AUTHOR_NAME", "PYTHONPATH"} & set(core)


def test_env_forwarding_of_a_provider_config() -> None:
    from dataclasses import dataclass, field

    from dsh.subprocess import EnvForwarding, EnvPolicy

    @dataclass(frozen=True)
    class Config:
        env_policy: EnvPolicy = "core"
        credential_env: tuple[str, ...] = ("KEY",)
        inherit_env: tuple[str, ...] = ("INHERITED",)
        env: dict[str, str] = field(default_factory=lambda: {"SET": "1"})
        tool_env: tuple[str, ...] = ("INHERITED",)

    forwarding = EnvForwarding.of(Config(), keep=("PRODUCT_HOME",))
    assert forwarding == EnvForwarding(
        policy="core",
        keep=("PRODUCT_HOME",),
        forward=("KEY", "INHERITED"),
        env={"SET": "1"},
        tool_visible=("INHERITED",),
    )
    ambient = {"KEY": "k", "INHERITED": "i", "PRODUCT_HOME": "/h", "OTHER": "o"}
    assert forwarding.overlay(ambient) == {"KEY": "k", "INHERITED": "i", "OTHER": None, "SET": "1"}


TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def test_a_spawn_in_a_trace_context_carries_it_and_only_there(
    runtime: SubprocessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACEPARENT", "00-ambient-ambient-01")
    monkeypatch.setenv("TRACESTATE", "vendor=ambient")
    outside = await _child_env(runtime, {})
    assert (outside["TRACEPARENT"], outside["TRACESTATE"]) == (
        "00-ambient-ambient-01",
        "vendor=ambient",
    )
    with spawn_trace_context({"traceparent": TRACEPARENT}):
        inside = await _child_env(runtime, {})
        given = await _child_env(runtime, {"TRACEPARENT": "00-given-given-01"})
    assert inside["TRACEPARENT"] == TRACEPARENT
    assert "TRACESTATE" not in inside  # the ambient state belonged to another parent
    assert given["TRACEPARENT"] == "00-given-given-01"  # the spawn's own overlay wins
    with spawn_trace_context({"traceparent": TRACEPARENT, "tracestate": "dsh=1"}):
        stated = await _child_env(runtime, {})
    assert (stated["TRACEPARENT"], stated["TRACESTATE"]) == (TRACEPARENT, "dsh=1")
    # The products get the sampled bit only: Codex rejects the SDK's "03" (random trace id).
    with spawn_trace_context({"traceparent": TRACEPARENT[:-2] + "03"}):
        level_one = await _child_env(runtime, {})
    assert level_one["TRACEPARENT"] == TRACEPARENT
    with spawn_trace_context({"traceparent": TRACEPARENT[:-2] + "02"}):
        unsampled = await _child_env(runtime, {})
    assert unsampled["TRACEPARENT"] == TRACEPARENT[:-2] + "00"
    with spawn_trace_context({}):  # no recording span: nothing changes
        empty = await _child_env(runtime, {})
    assert empty["TRACEPARENT"] == "00-ambient-ambient-01"
    assert TRACE_CONTEXT_ENV == {"traceparent": "TRACEPARENT", "tracestate": "TRACESTATE"}
