"""``Limits`` values, ``Limits.of`` a config, and the check that names an unenforceable field."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dsh.subprocess import KERNEL_LAYER_ENV, Limits, SpawnSpec, kernel_layer, limits_problem


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"memory": 1024}, "limits.memory"),
        ({"memory": True}, "limits.memory"),
        ({"tasks": 0}, "limits.tasks"),
        ({"tasks": 1.5}, "limits.tasks"),
        ({"cpu": 0.0}, "limits.cpu"),
        ({"cpu": float("nan")}, "limits.cpu"),
    ],
)
def test_bad_limits_name_the_field(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Limits(**fields)  # type: ignore[arg-type]


def test_limits_of_a_config() -> None:
    table = SimpleNamespace(memory=64 << 20, tasks=None, cpu=1.5)
    limits = Limits.of(SimpleNamespace(limits=table, limits_best_effort=True))
    assert limits == Limits(memory=64 << 20, cpu=1.5, best_effort=True)
    assert limits.requested == ("cpu", "memory")
    assert Limits.of(SimpleNamespace(limits=None)) is None
    assert Limits.of(SimpleNamespace(limits=SimpleNamespace())) is None


def test_spawn_spec_takes_only_limits() -> None:
    with pytest.raises(ValueError, match="limits must be a Limits"):
        SpawnSpec(["true"], limits={"memory": "4G"})  # type: ignore[arg-type]


def test_without_the_kernel_layer_limits_are_a_problem_unless_best_effort(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KERNEL_LAYER_ENV, "off")
    layer = kernel_layer()
    assert not layer.active
    assert layer.describe() == (
        f"off: forced off by {KERNEL_LAYER_ENV}=off",
        "none (no kernel layer)",
    )
    problem = limits_problem(Limits(tasks=64))
    assert (
        problem
        == f"limits.tasks cannot be enforced on this machine (forced off by {KERNEL_LAYER_ENV}=off)"
    )
    assert limits_problem(Limits(tasks=64, best_effort=True)) is None
    assert limits_problem(None) is None
