"""Where ``dsh demo`` runs background jobs: ``--executor``, ``--address``, ``--max-runs-per-node``.

The demo's providers are always its loopback ones, so it takes no ``--profile``: a profile's
providers (real endpoints, credential names) would have to be ignored, which is not what a user
who passes one expects. Only where jobs run is the user's to choose, with the same three values
(and the same rules) as a profile's ``[jobs]`` keys. They are checked before anything starts;
an error names the option.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pydantic

from dsh.jobs import JobsConfig, executor_for

__all__ = ["LOCAL_JOBS", "DemoJobs", "DemoOptionError", "demo_jobs"]

#: The demo's option for each ``[jobs]`` key.
OPTIONS = {
    "executor": "--executor",
    "address": "--address",
    "max_runs_per_node": "--max-runs-per-node",
}
#: The demo's ``[jobs]`` table by default: local, 10 jobs per owner (scenarios run together).
LOCAL_JOBS = {"max_concurrent_jobs_per_owner": 10}


class DemoOptionError(ValueError):
    """A bad ``dsh demo`` option; the message names it."""


@dataclass(frozen=True, slots=True)
class DemoJobs:
    """The demo's ``[jobs]`` table and the bounds that follow from where jobs run."""

    table: dict[str, Any]
    #: Each scenario's bound as a whole, and each wait inside it (a job's output, a request).
    scenario_s: float
    wait_s: float

    @property
    def on_ray(self) -> bool:
        return self.table.get("executor") == "ray"

    @property
    def note(self) -> str | None:
        """What the demo on Ray can and cannot check, for its output."""
        if not self.on_ray:
            return None
        address = self.table.get("address", "auto")
        return (
            f"Background jobs ran on the Ray executor (address: {address}). The demo's model"
            " servers listen on 127.0.0.1 and its workspace is a temporary directory here, so"
            " its jobs can run only on Ray nodes on this machine; its process checks walk this"
            " machine's /proc (dsh's tree marker and the demo's own tag), not other machines."
        )


def demo_jobs(
    executor: str | None = None, address: str | None = None, max_runs_per_node: int | None = None
) -> DemoJobs:
    """The validated table for the given options (``None``: not given). Starts and connects
    nothing; imports Ray only for ``executor="ray"`` (to report a missing ``[ray]`` extra)."""
    given = {
        name: value
        for name, value in (
            ("executor", executor),
            ("address", address),
            ("max_runs_per_node", max_runs_per_node),
        )
        if value is not None
    }
    if given.get("executor", "local") != "ray":
        for name in ("address", "max_runs_per_node"):
            if name in given:
                raise DemoOptionError(f"{OPTIONS[name]} is a setting of --executor ray")
    table = {**LOCAL_JOBS, **given}
    try:
        config = JobsConfig.model_validate(table)
    except pydantic.ValidationError as exc:
        detail = exc.errors(include_url=False, include_input=False, include_context=False)[0]
        place = detail["loc"][0] if detail["loc"] else "executor"
        message = str(detail["msg"]).removeprefix("Value error, ")
        raise DemoOptionError(f"{OPTIONS.get(str(place), place)}: {message}") from exc
    try:
        executor_for(config)  # builds only: says now if the [ray] extra is missing
    except ImportError as exc:
        raise DemoOptionError(f"--executor: {exc}") from exc
    if config.executor == "ray":
        # A job's first start connects to the cluster and starts an actor (seconds each).
        return DemoJobs(table, scenario_s=90.0, wait_s=75.0)
    return DemoJobs(table, scenario_s=12.0, wait_s=10.0)
