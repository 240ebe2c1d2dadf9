"""``dsh doctor`` on the real workspace install: every product of the table, pinned, with usable
payloads."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import pytest

from dsh.tool_subagent._cli import main
from dsh.tool_subagent._known_providers import KNOWN_PROVIDERS, load_provider

# This machine kind: root with cgroups (a cgroup2 hierarchy beside v1 memory, pids and cpu).
CONTAINMENT_HERE = (
    (
        "containment",
        "layers",
        "kernel (cgroup) > supervisor (subreaper) > spawner > sampler > member record",
        "yes",
    ),
    (
        "containment",
        "kernel layer",
        "on: a cgroup v2 group per run, torn down by cgroup.kill",
        "yes",
    ),
    ("containment", "limits", "cpu (cgroup v1), memory (cgroup v1), tasks (cgroup v1)", "yes"),
)


def _codex_x_profile(directory: Path, line: str) -> Path:
    """A profile with one Codex instance, ``codex-x``, whose config also holds ``line``."""
    profile = directory / "p.toml"
    profile.write_text(
        f'[[provider]]\nkind = "codex"\n[provider.config]\nprovider_name = "codex-x"\n{line}\n'
    )
    return profile


def _rows(out: str) -> set[tuple[str, ...]]:
    return {
        tuple(cell.strip() for cell in line.strip().strip("│").split("│"))
        for line in out.splitlines()
        if line.startswith("│")
    }


def test_doctor_says_which_containment_layers_are_active_and_why_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    profile = _codex_x_profile(tmp_path, 'limits = { memory = "4G", tasks = 512 }')
    assert main(["doctor", "--profile", str(profile)]) == 0
    rows = _rows(capsys.readouterr().out)
    assert set(CONTAINMENT_HERE) <= rows
    assert ("codex-x", "limits", "memory, tasks: enforced", "yes") in rows
    monkeypatch.setenv("DSH_KERNEL_LAYER", "off")
    assert main(["doctor", "--profile", str(profile)]) == 1
    rows = _rows(capsys.readouterr().out)
    reason = "forced off by DSH_KERNEL_LAYER=off"
    assert ("containment", "kernel layer", f"off: {reason}", "yes") in rows
    assert ("containment", "limits", "none (no kernel layer)", "yes") in rows
    failing = f"limits.memory cannot be enforced on this machine ({reason})"
    assert ("codex-x", "limits", failing, "NO") in rows


def _pinned_rows() -> set[tuple[str, ...]]:
    """The exact rows of the two shipped products (their pins and credential names)."""
    facts = (  # kind, product pin row, payload row, credential variables, login file
        ("codex", ("Codex version", "0.163.0"), "Codex payload", "none", "exists"),
        (
            "claude-code",
            ("claude-agent-sdk version", "0.2.189"),
            "Claude Code payload",
            "ANTHROPIC_API_KEY",
            "absent",
        ),
    )
    rows: set[tuple[str, ...]] = set()
    for kind, pin, payload, credentials, login in facts:
        distribution = f"dsh-subagent-{kind}"
        rows |= {
            (kind, "package", f"{distribution} {version(distribution)}", "yes"),
            (kind, *pin, "yes"),
            (kind, payload, "present and executable", "yes"),
            (kind, "isolation", "native", "yes"),
            (kind, "credential variables", credentials, "yes"),
            (kind, "login file", login, "yes"),
        }
    return rows


def test_doctor_reports_every_product_of_the_table_healthy(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The default profile is every installed kind: exactly the table's products, each healthy
    (the two shipped ones row by row; any other row of the table by its package and health)."""
    monkeypatch.setenv("COLUMNS", "200")  # no cell wraps
    for known in KNOWN_PROVIDERS:
        for name in load_provider(known.kind).config.credential_env:  # type: ignore[attr-defined]
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-value-never-shown")
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    (tmp_path / "codex").mkdir()
    (tmp_path / "codex" / "auth.json").write_text("{}")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    rc = main(["doctor"])
    out = capsys.readouterr().out
    rows = _rows(out)
    assert {row[0] for row in rows} == {"containment", *(k.kind for k in KNOWN_PROVIDERS)}
    others = {row for row in rows if row[0] not in ("codex", "claude-code", "containment")}
    assert rows == _pinned_rows() | others | set(CONTAINMENT_HERE)
    for known in KNOWN_PROVIDERS:
        dist = known.distribution
        assert (known.kind, "package", f"{dist} {version(dist)}", "yes") in rows
    assert all(row[3] == "yes" for row in others), others
    assert rc == 0
    assert "sk-ant-value-never-shown" not in out


def test_doctor_profile_reports_each_instance_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    profile = _codex_x_profile(tmp_path, 'inherit_env = ["MY_GATEWAY_TOKEN"]')
    monkeypatch.setenv("MY_GATEWAY_TOKEN", "value-never-shown")
    assert main(["doctor", "--profile", str(profile)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "credential variables" in line)
    assert "codex-x" in row
    assert "MY_GATEWAY_TOKEN" in row
    assert "value-never-shown" not in out


def test_doctor_shows_each_instances_isolation_and_whether_a_template_is_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    template = tmp_path / "secret-template-dir"
    template.mkdir()
    with_login = tmp_path / "template-with-login"  # a template may bring a login file
    with_login.mkdir()
    (with_login / "auth.json").write_text("{}")
    # A login file the user has: a private instance never uses it, and says so.
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    (tmp_path / "codex").mkdir()
    (tmp_path / "codex" / "auth.json").write_text("{}")
    profile = tmp_path / "p.toml"
    profile.write_text(
        '[[provider]]\nkind = "codex"\n[provider.config]\nprovider_name = "cx-native"\n'
        '[[provider]]\nkind = "codex"\n[provider.config]\nprovider_name = "cx-private"\n'
        f'isolation = "private"\nhome_template = "{template}"\n'
        '[[provider]]\nkind = "claude-code"\n[provider.config]\nprovider_name = "cc-private"\n'
        'isolation = "private"\n'
        '[[provider]]\nkind = "codex"\n[provider.config]\nprovider_name = "cx-tpl-login"\n'
        f'isolation = "private"\nhome_template = "{with_login}"\n'
    )
    assert main(["doctor", "--profile", str(profile)]) == 0
    out = capsys.readouterr().out
    rows = {
        tuple(cell.strip() for cell in line.strip().strip("│").split("│"))
        for line in out.splitlines()
        if line.startswith("│")
    }
    assert ("cx-native", "isolation", "native", "yes") in rows
    assert ("cx-native", "login file", "exists", "yes") in rows
    assert ("cx-private", "isolation", "private (template set)", "yes") in rows
    assert ("cx-private", "login file", "not used (private home per run)", "yes") in rows
    assert ("cc-private", "isolation", "private (no template)", "yes") in rows
    assert ("cx-tpl-login", "login file", "exists", "yes") in rows
    assert "secret-template-dir" not in out
