"""The demo's own count of the product processes it caused, wherever they were spawned.

With the local executor every product process is spawned by the demo process, so a marker walk
by owner pid finds them. On the Ray executor a background job's products are spawned by a Ray
worker process, whose pid the demo never learns (and should not trust dsh's records for). So the
demo tags its runs: each provider config gets :data:`RUN_ENV` = a fresh nonce in its ``env``
table (plain data, so it travels with a job like the rest of the config), and the walk below
(``marked_processes(env=...)``, which reads ``/proc``, not dsh's records) keeps the processes of
this user carrying both a dsh tree marker and the tag. It sees every process on this machine;
processes on other machines are out of its reach.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from dsh.subprocess import marked_processes

__all__ = ["RUN_ENV", "new_run_tag", "tagged", "tagged_marked_processes"]

#: The env name carrying the demo's nonce into its product processes.
RUN_ENV = "DSH_DEMO_RUN"


def new_run_tag() -> str:
    """A nonce naming one demo run (no secret: it only tells this run's processes apart)."""
    return secrets.token_hex(8)


def tagged(config: Mapping[str, Any], tag: str) -> dict[str, Any]:
    """``config`` with :data:`RUN_ENV` = ``tag`` added to its ``env`` table."""
    return {**config, "env": {**config.get("env", {}), RUN_ENV: tag}}


def tagged_marked_processes(tag: str) -> list[int]:
    """Live pids (this machine, this user, not this process) whose environment holds a dsh tree
    marker and :data:`RUN_ENV` = ``tag`` (blocking briefly)."""
    return marked_processes(env={RUN_ENV: tag})
