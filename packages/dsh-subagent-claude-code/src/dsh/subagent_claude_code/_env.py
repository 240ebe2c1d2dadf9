"""Claude Code's environment: forwarded credentials, the env policy, and the Bash-tool env.

The CLI gets the scrubbed (or ``core``) ambient env, the provider's own credential names
(``credential_env``) and the ``inherit_env`` names that are set, then ``env``. Its Bash commands
get none of the forwarded names: the CLI runs the script named by ``CLAUDE_ENV_FILE`` ahead of
every Bash command, and ours unsets them. (``CLAUDE_CODE_SUBPROCESS_ENV_SCRUB=1``, the CLI's own
scrub, refuses to start at 2.1.332 unless bubblewrap is installed, and scrubs only Anthropic and
cloud names; see docs/decisions.md.)
"""

from __future__ import annotations

import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dsh.subagent.kit import copy_home_template, make_off_loop, new_owned_dir_path
from dsh.subagent_claude_code._run_dirs import RUN_DIR_TAG, run_dir_prefix
from dsh.subagent_claude_code.config import ClaudeCodeProviderConfig
from dsh.subprocess import EnvForwarding

__all__ = [
    "CLAUDE_CONFIG_DIR_ENV",
    "ENV_FILE_NAME",
    "PRIVATE_CONFIG_DIR",
    "PRIVATE_HOME_DIR",
    "RunDir",
    "forwarding",
    "make_run_dir",
    "make_run_dir_off_loop",
    "prepare_run_dir",
    "private_home_overlay",
    "private_settings_file",
    "tool_env_script",
]

CLAUDE_CONFIG_DIR_ENV = ("CLAUDE_CONFIG_DIR",)
"""The product's own config names: the ``core`` policy keeps them."""

ENV_FILE_NAME = "dsh-tool-env.sh"
PRIVATE_HOME_DIR = "home"
"""Under ``isolation = "private"``: the CLI's ``HOME``, inside the run dir (empty)."""
PRIVATE_CONFIG_DIR = "claude-config"
"""Under ``isolation = "private"``: the CLI's ``CLAUDE_CONFIG_DIR`` (the template's copy)."""
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def forwarding(config: ClaudeCodeProviderConfig) -> EnvForwarding:
    """The config's env fields as one ``EnvForwarding`` (overlay, names, hidden names)."""
    return EnvForwarding.of(config, keep=CLAUDE_CONFIG_DIR_ENV)


def tool_env_script(config: ClaudeCodeProviderConfig) -> str:
    """The ``CLAUDE_ENV_FILE`` script: the deployment's own env file first, then ``unset``.

    Names that are no shell identifier cannot be shell variables, so they are left out.
    """
    lines = []
    own = config.env.get("CLAUDE_ENV_FILE")
    if own:
        lines.append(f". {shlex.quote(own)}")
    names = [name for name in forwarding(config).hidden() if _SHELL_NAME.fullmatch(name)]
    if names:
        lines.append("unset " + " ".join(names))
    return "\n".join(lines) + "\n"


def make_run_dir(config: ClaudeCodeProviderConfig) -> tuple[str, str]:
    """A fresh run-owned dir holding the ``CLAUDE_ENV_FILE`` script: ``(dir, script path)``.

    Its name tells its owner (``_run_dirs``), so a dir a killed owner left is swept later.

    The script is read-only, so a tool writing into ``$TMPDIR`` does not replace it by accident
    (the same user can still change it on purpose; see the provider page's limits).
    """
    run_dir = tempfile.mkdtemp(prefix=run_dir_prefix())
    try:
        script = Path(run_dir) / ENV_FILE_NAME
        script.write_text(tool_env_script(config), encoding="utf-8")
        script.chmod(0o400)
        if config.isolation == "private":
            (Path(run_dir) / PRIVATE_HOME_DIR).mkdir(mode=0o700)
            (Path(run_dir) / PRIVATE_CONFIG_DIR).mkdir(mode=0o700)
            copy_home_template(config.home_template, Path(run_dir) / PRIVATE_CONFIG_DIR)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return run_dir, str(script)


def private_home_overlay(config: ClaudeCodeProviderConfig, run_dir: str) -> dict[str, str]:
    """``HOME`` and ``CLAUDE_CONFIG_DIR`` inside ``run_dir`` under ``private``; else nothing."""
    if config.isolation != "private":
        return {}
    return {
        "HOME": str(Path(run_dir) / PRIVATE_HOME_DIR),
        "CLAUDE_CONFIG_DIR": str(Path(run_dir) / PRIVATE_CONFIG_DIR),
    }


def private_settings_file(config: ClaudeCodeProviderConfig, run_dir: str) -> str | None:
    """The private config dir's ``settings.json`` when the template brought one (under
    ``private`` no setting source is read, so the CLI is handed it with ``--settings``)."""
    if config.isolation != "private" or config.home_template is None:
        return None
    path = Path(run_dir) / PRIVATE_CONFIG_DIR / "settings.json"
    return str(path) if path.is_file() else None


async def make_run_dir_off_loop(config: ClaudeCodeProviderConfig) -> tuple[str, str]:
    """``make_run_dir`` in a worker thread; a cancelled caller never leaks the dir."""
    return await make_off_loop(lambda: make_run_dir(config), lambda made: made[0])


@dataclass(frozen=True)
class RunDir:
    """A run's dir: its path, the env script's path in it, and what the spawn must create.

    ``files`` is ``None`` when the dir exists already; else the spawn creates the dir with these
    files (``SpawnSpec.owned_files``), in the supervisor, off the host's CPU.
    """

    path: str
    env_file: str
    files: dict[str, bytes] | None


async def prepare_run_dir(config: ClaudeCodeProviderConfig) -> RunDir:
    """The run dir of the next run. Under ``private`` isolation it is made here, in a worker
    thread (the template copy is the host's work); otherwise it is only named, and the spawn
    makes it with its env script."""
    if config.isolation == "private":
        path, env_file = await make_run_dir_off_loop(config)
        return RunDir(path, env_file, None)
    path = new_owned_dir_path(RUN_DIR_TAG)
    script = tool_env_script(config).encode()
    return RunDir(path, str(Path(path) / ENV_FILE_NAME), {ENV_FILE_NAME: script})
