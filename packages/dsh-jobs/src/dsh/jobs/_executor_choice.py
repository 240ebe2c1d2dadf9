"""``executor_for``: the executor a ``[jobs]`` table names (Ray is imported only when asked for)."""

from __future__ import annotations

from collections.abc import Sequence

from dsh.jobs._executor import Executor, LocalExecutor
from dsh.jobs._types import JobsConfig

__all__ = [
    "DEFAULT_MAX_RUNS_PER_NODE",
    "NODE_RESOURCE",
    "RAY_EXTRA_HINT",
    "executor_for",
    "run_share",
]

#: The custom Ray resource a node declares (one unit) to run dsh jobs.
NODE_RESOURCE = "dsh_node"

#: ``max_runs_per_node`` when a profile leaves it out: a product run costs 0.3-0.5 GB and most of
#: a core while it works.
DEFAULT_MAX_RUNS_PER_NODE = 2
RAY_EXTRA_HINT = (
    'executor = "ray" needs Ray; install it with pip install "dsh-jobs[ray]"'
    ' (or "dsh-tool-subagent[ray]")'
)


def run_share(max_runs_per_node: int) -> float:
    """One run's share of :data:`NODE_RESOURCE`: ``1/n`` rounded *down* to Ray's 0.0001 units.

    Rounding down keeps exactly ``n`` shares within one unit (1/7 rounded up to 0.1429 would fit
    only 6), and for ``n <= 99`` one more share does not fit (``MAX_RUNS_PER_NODE`` is 64). A
    quarter unit is added so that the float converts to the same whole number of units whether
    Ray truncates or rounds it (0.0666 is 665.99... units as a float).
    """
    return (10_000 // max_runs_per_node + 0.25) / 10_000


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
