"""``executor_for``: the executor a ``[jobs]`` table names (Ray is imported only when asked for)."""

from __future__ import annotations

from collections.abc import Sequence

from dsh.jobs._executor import Executor, LocalExecutor
from dsh.jobs._ray_placement import DEFAULT_MAX_RUNS_PER_NODE
from dsh.jobs._types import JobsConfig

__all__ = ["RAY_EXTRA_HINT", "executor_for"]

RAY_EXTRA_HINT = (
    'executor = "ray" needs Ray; install it with pip install "dsh-jobs[ray]"'
    ' (or "dsh-tool-subagent[ray]")'
)


def executor_for(config: JobsConfig, *, worker_setup: Sequence[str] = ()) -> Executor:
    """The executor ``config.executor`` names. Builds it only: nothing connects or starts.

    ``worker_setup`` names (``"package.module:function"``) are called with no argument by each
    remote executor process when it starts (the tool layer passes ``dsh.subprocess``'s orphan
    reaper), then ``config.worker_setup``'s; the local executor ignores them. Raises
    ``ImportError`` naming the ``[ray]`` extra when ``executor = "ray"`` and Ray is not installed.
    """
    if config.executor == "local":
        return LocalExecutor()
    try:
        from dsh.jobs._ray_executor import RayExecutor
    except ImportError as exc:
        raise ImportError(RAY_EXTRA_HINT, name="ray") from exc
    return RayExecutor(
        address=config.address or "auto",
        max_runs_per_node=config.max_runs_per_node or DEFAULT_MAX_RUNS_PER_NODE,
        worker_setup=(*worker_setup, *config.worker_setup),
    )
