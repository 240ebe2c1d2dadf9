"""THIRD_PARTY_NOTICES.md matches what the installed runtime closure's metadata generates."""

from __future__ import annotations

from pathlib import Path

from third_party_notices import (
    NOTICES_FILE,
    REGENERATE_COMMAND,
    check,
    closure,
    main,
    render,
)

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / NOTICES_FILE


def test_committed_file_is_current() -> None:
    committed = COMMITTED.read_bytes()
    expected = render().encode("utf-8")
    assert committed == expected, (
        f"{NOTICES_FILE} is stale; regenerate it from the workspace root with: {REGENERATE_COMMAND}"
    )


def test_one_edited_line_is_detected() -> None:
    expected = render()
    lines = expected.splitlines(keepends=True)
    index = next(i for i, ln in enumerate(lines) if ln.startswith("- **psutil**"))
    lines[index] = lines[index].replace("psutil", "psutil-edited", 1)
    mutated = "".join(lines)
    assert mutated != expected
    assert check(expected, expected) is None
    problem = check(mutated, expected)
    assert problem is not None
    assert REGENERATE_COMMAND in problem


def test_check_command_exit_codes(tmp_path: Path) -> None:
    assert main(["--check", "--output", str(tmp_path)]) == 1
    assert main(["--write", "--output", str(tmp_path)]) == 0
    assert main(["--check", "--output", str(tmp_path)]) == 0
    target = tmp_path / NOTICES_FILE
    target.write_text(target.read_text(encoding="utf-8") + "hand edit\n", encoding="utf-8")
    assert main(["--check", "--output", str(tmp_path)]) == 1


def test_closure_membership() -> None:
    names = set(closure())
    for wanted in ("psutil", "pydantic", "claude-agent-sdk", "openai-codex-cli-bin", "mcp"):
        assert wanted in names
    for dev_tool in ("pytest", "ruff", "mypy", "hypothesis", "hatchling"):
        assert dev_tool not in names
    listed = render()
    assert "**dsh-" not in listed
    for dev_tool in ("pytest", "ruff", "mypy"):
        assert f"**{dev_tool}**" not in listed


def test_output_has_no_urls_or_hosts() -> None:
    text = render()
    assert "://" not in text
    assert "pypi" not in text.lower()
    assert "files.pythonhosted" not in text
    assert str(ROOT) not in text
