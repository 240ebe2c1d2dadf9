"""Where a Ray job runs, as arithmetic: the node resource, one run's share of it, and the default
number of runs per node. Ray-free, so that choosing an executor and testing the shares need no
``[ray]`` extra; the Ray executor places its actors with it.
"""

from __future__ import annotations

__all__ = ["DEFAULT_MAX_RUNS_PER_NODE", "NODE_RESOURCE", "run_share"]

#: The custom Ray resource a node declares (one unit) to run dsh jobs.
NODE_RESOURCE = "dsh_node"

#: ``max_runs_per_node`` when a profile leaves it out: a product run costs 0.3-0.5 GB and most of
#: a core while it works.
DEFAULT_MAX_RUNS_PER_NODE = 2


def run_share(max_runs_per_node: int) -> float:
    """One run's share of :data:`NODE_RESOURCE`: ``1/n`` rounded *down* to Ray's 0.0001 units.

    Rounding down keeps exactly ``n`` shares within one unit (1/7 rounded up to 0.1429 would fit
    only 6), and for ``n <= 99`` one more share does not fit (``MAX_RUNS_PER_NODE`` is 64). A
    quarter unit is added so that the float converts to the same whole number of units whether
    Ray truncates or rounds it (0.0666 is 665.99... units as a float).
    """
    return (10_000 // max_runs_per_node + 0.25) / 10_000
