"""The benchmark's figures: samples, statistics, targets, and the printed table.

Split from ``run.py`` (which measures) so that each file keeps one concern.
"""

from __future__ import annotations

import math
import shutil
import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

Product = Literal["codex", "claude-code"]
PRODUCTS: tuple[Product, ...] = ("codex", "claude-code")
VARIANTS = ("dsh", "sdk", "cli")
PLAIN = "plain"
WATCHED = "watched"  # dsh with the caller's watchdog armed (the tool's default limits)
"""The optional fourth variant: dsh with its supervisors off (``--ab-plain``), in the same trios."""
TARGET_E2E_RATIO = 0.98
TARGET_CPU_RATIO = 1.0
TARGET_TEARDOWN_S = 0.100
TARGET_CANCEL_TOOL_S: dict[Product, float] = {"codex": 0.200, "claude-code": 0.300}
TARGET_LAG_P99_S = 0.010


def stats_of(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "median": statistics.median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "p90": _quantile(ordered, 0.90),
    }


def lag_stats(values: list[float]) -> dict[str, Any]:
    return {**stats_of(values), "p99": _quantile(sorted(values), 0.99)} if values else {"n": 0}


def _quantile(ordered: list[float], q: float) -> float:
    index = max(0, math.ceil(q * len(ordered)) - 1)
    return ordered[min(index, len(ordered) - 1)]


# ---- samples -------------------------------------------------------------------------------


@dataclass
class Sample:
    answer_s: float  # start -> answer in hand
    total_s: float  # start -> answer in hand and the product process gone
    cpu_s: float  # this process's CPU time (all threads) over the run
    close_s: float | None = None  # dsh only: aclose() -> whole-tree exit
    late_exit_s: float | None = None  # dsh only: set when the independent check saw leftovers


@dataclass
class CancelSample:
    settle_s: float  # cancel() -> result() returns aborted
    tree_exit_s: float  # cancel() -> aclose() returns (whole tree gone)
    late_exit_s: float | None = None


@dataclass
class Results:
    e2e: dict[str, list[Sample]] = field(
        default_factory=lambda: {v: [] for v in (*VARIANTS, PLAIN, WATCHED)}
    )
    cancel_idle: list[CancelSample] = field(default_factory=list)
    cancel_tool: list[CancelSample] = field(default_factory=list)
    single_wall: list[float] = field(default_factory=list)
    multi_wall: list[float] = field(default_factory=list)
    lag: list[float] = field(default_factory=list)
    floor_lag: list[float] = field(default_factory=list)
    sdk_multi_wall: list[float] = field(default_factory=list)
    sdk_lag: list[float] = field(default_factory=list)
    sdk_floor_lag: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def summarize(product: Product, results: Results, concurrency: int) -> dict[str, Any]:
    e2e = {
        variant: {
            "answer_s": stats_of([s.answer_s for s in samples]),
            "total_s": stats_of([s.total_s for s in samples]),
            "cpu_s": stats_of([s.cpu_s for s in samples]),
        }
        for variant, samples in results.e2e.items()
        if samples
    }
    dsh = results.e2e["dsh"]
    summary: dict[str, Any] = {
        "e2e": e2e,
        "teardown_s": stats_of([s.close_s for s in dsh if s.close_s is not None]),
        "cancel_idle": {
            "settle_s": stats_of([c.settle_s for c in results.cancel_idle]),
            "tree_exit_s": stats_of([c.tree_exit_s for c in results.cancel_idle]),
        },
        "cancel_tool": {
            "settle_s": stats_of([c.settle_s for c in results.cancel_tool]),
            "tree_exit_s": stats_of([c.tree_exit_s for c in results.cancel_tool]),
        },
        "concurrency": {
            "n": concurrency,
            "single_wall_s": stats_of(results.single_wall),
            "multi_wall_s": stats_of(results.multi_wall),
        },
        "loop_lag_s": lag_stats(results.lag),
        "floor_loop_lag_s": lag_stats(results.floor_lag),
        "sdk_loop_lag_s": lag_stats(results.sdk_lag),
        "sdk_floor_loop_lag_s": lag_stats(results.sdk_floor_lag),
        "sdk_multi_wall_s": stats_of(results.sdk_multi_wall),
        "late_tree_exits": [
            late
            for late in (
                *(s.late_exit_s for s in dsh),
                *(c.late_exit_s for c in (*results.cancel_idle, *results.cancel_tool)),
            )
            if late is not None
        ],
        "errors": results.errors,
    }
    single = summary["concurrency"]["single_wall_s"].get("median")
    multi = summary["concurrency"]["multi_wall_s"].get("median")
    summary["concurrency"]["ratio"] = multi / single if single and multi else None
    peers = [v for v in ("sdk", "cli") if v in e2e]
    if "dsh" in e2e and peers:
        fastest = min(peers, key=lambda v: e2e[v]["total_s"]["median"])
        summary["e2e_fastest_peer"] = fastest
        summary["e2e_ratio_vs_fastest_peer"] = (
            e2e["dsh"]["total_s"]["median"] / e2e[fastest]["total_s"]["median"]
        )
        summary["e2e_paired_ratio_vs_fastest_peer"] = paired_ratio(
            results.e2e["dsh"], results.e2e[fastest]
        )
        for v in peers:
            summary[f"e2e_ratio_vs_{v}"] = (
                e2e["dsh"]["total_s"]["median"] / e2e[v]["total_s"]["median"]
            )
            summary[f"e2e_paired_ratio_vs_{v}"] = paired_ratio(results.e2e["dsh"], results.e2e[v])
    if "dsh" in e2e and "sdk" in e2e:
        summary["cpu_ratio_vs_sdk"] = e2e["dsh"]["cpu_s"]["median"] / e2e["sdk"]["cpu_s"]["median"]
        summary["answer_paired_ratio_vs_sdk"] = paired_ratio(
            results.e2e["dsh"], results.e2e["sdk"], "answer_s"
        )
    if "dsh" in e2e and PLAIN in e2e:
        summary["supervised_vs_plain"] = {
            metric: paired_ratio(results.e2e["dsh"], results.e2e[PLAIN], metric)
            for metric in ("total_s", "answer_s", "cpu_s")
        }
    if "dsh" in e2e and WATCHED in e2e:
        summary["watched_vs_dsh"] = {
            metric: paired_ratio(results.e2e[WATCHED], results.e2e["dsh"], metric)
            for metric in ("total_s", "answer_s", "cpu_s")
        }
        summary["watchdog_cpu_ms"] = 1000 * (
            e2e[WATCHED]["cpu_s"]["median"] - e2e["dsh"]["cpu_s"]["median"]
        )
    summary["targets"] = _targets(product, summary)
    return summary


def paired_ratio(ours: list[Sample], peer: list[Sample], metric: str = "total_s") -> float | None:
    """The median of ``ours[i] / peer[i]``: the i-th samples ran back to back in one trio."""
    pairs = zip(ours, peer, strict=True)
    ratios = [getattr(a, metric) / getattr(b, metric) for a, b in pairs if getattr(b, metric) > 0]
    return statistics.median(ratios) if ratios else None


def _targets(product: Product, s: dict[str, Any]) -> list[dict[str, Any]]:
    def check(name: str, value: float | None, limit: float, unit: str) -> dict[str, Any]:
        status = "n/a" if value is None else ("PASS" if value < limit else "MISS")
        return {"target": name, "value": value, "limit": limit, "unit": unit, "status": status}

    ratio = s.get("e2e_paired_ratio_vs_fastest_peer")
    e2e = check(
        "dsh end-to-end / fastest peer (median of per-trio ratios)", ratio, TARGET_E2E_RATIO, "x"
    )
    if ratio is not None and ratio <= TARGET_E2E_RATIO:
        e2e["status"] = "PASS"  # the target is "<=", the others are "<"
    lag = s["loop_lag_s"].get("p99")
    cpu_ratio = s.get("cpu_ratio_vs_sdk")
    cpu = check("parent CPU per run / the SDK's (medians)", cpu_ratio, TARGET_CPU_RATIO, "x")
    if cpu_ratio is not None and cpu_ratio <= TARGET_CPU_RATIO:
        cpu["status"] = "PASS"  # "at most"
    return [
        e2e,
        cpu,
        check(
            "aclose() to tree exit, no tool (median)",
            s["teardown_s"].get("median"),
            TARGET_TEARDOWN_S,
            "s",
        ),
        check(
            "cancel to tree exit, tool running (median)",
            s["cancel_tool"]["tree_exit_s"].get("median"),
            TARGET_CANCEL_TOOL_S[product],
            "s",
        ),
        check("event-loop lag p99, runs in flight", lag, TARGET_LAG_P99_S, "s"),
    ]


# ---- output --------------------------------------------------------------------------------


def _ms(stats: dict[str, Any], key: str = "median") -> str:
    value = stats.get(key)
    return "-" if value is None else f"{value * 1000:.0f}"


def print_report(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(120, shutil.get_terminal_size().columns))
    meta = report["meta"]
    console.print(
        f"dsh benchmarks — {meta['runs']} rounds, {meta['cpus']} CPUs, "
        f"load {meta['load_before']} → {meta['load_after']}, {meta['date']}"
        + ("" if meta.get("nice", "auto") == "auto" else f", dsh's products at nice {meta['nice']}")
    )
    cost = meta.get("spawn_cost_ms")
    if cost:
        console.print(
            f"spawn() of /bin/true, median of {cost['samples']}: supervised "
            f"{cost['supervised']} ms, plain Popen {cost['plain']} ms, added {cost['added']} ms"
            + (
                f"; in a cgroup (kernel layer) {cost['kernel']} ms, {cost['kernel_added']} ms more"
                if "kernel" in cost
                else ""
            )
        )
    if meta.get("kernel_layer"):
        console.print(f"kernel layer: {meta['kernel_layer']}")
    for product, s in report["products"].items():
        table = Table(title=f"{product}: median ms unless noted, \\[min-max]")
        table.add_column("metric")
        for column in ("dsh", "official SDK", "raw CLI", "dsh / peer"):
            table.add_column(column, justify="right")
        e2e = s["e2e"]

        def cell(variant: str, metric: str, e2e: dict[str, Any] = e2e) -> str:
            if variant not in e2e:
                return "-"
            st = e2e[variant][metric]
            return f"{_ms(st)} [{_ms(st, 'min')}-{_ms(st, 'max')}]"

        def ratio(metric: str, e2e: dict[str, Any] = e2e) -> str:
            if "dsh" not in e2e:
                return "-"
            parts = [
                f"{e2e['dsh'][metric]['median'] / e2e[v][metric]['median']:.2f}x {label}"
                for v, label in (("sdk", "SDK"), ("cli", "CLI"))
                if v in e2e and e2e[v][metric]["median"]
            ]
            return ", ".join(parts) or "-"

        paired = [
            f"{s[f'e2e_paired_ratio_vs_{v}']:.2f}x {label}"
            for v, label in (("sdk", "SDK"), ("cli", "CLI"))
            if s.get(f"e2e_paired_ratio_vs_{v}") is not None
        ]
        for label, metric in (
            ("end-to-end (answer + exit)", "total_s"),
            ("time to answer", "answer_s"),
            ("parent CPU per run", "cpu_s"),
        ):
            table.add_row(
                label, cell("dsh", metric), cell("sdk", metric), cell("cli", metric), ratio(metric)
            )
            if metric == "total_s" and paired:
                table.add_row("  same, median of per-trio ratios", "", "", "", ", ".join(paired))
        td = s["teardown_s"]
        table.add_row("aclose() → tree exit", f"{_ms(td)} [{_ms(td, 'max')} max]", "", "", "")
        for label, key in (
            ("cancel → tree exit, idle", "cancel_idle"),
            ("cancel → tree exit, tool running", "cancel_tool"),
        ):
            st = s[key]["tree_exit_s"]
            settle = _ms(s[key]["settle_s"])
            table.add_row(
                label, f"{_ms(st)} [{_ms(st, 'max')} max]", "", "", f"settled in {settle}"
            )
        lag, sdk_lag = s["loop_lag_s"], s["sdk_loop_lag_s"]
        if lag.get("n"):
            table.add_row(
                f"loop lag p99, {s['concurrency']['n']} in flight",
                f"{lag['p99'] * 1000:.1f} [{lag['max'] * 1000:.1f} max]",
                f"{sdk_lag['p99'] * 1000:.1f} [{sdk_lag['max'] * 1000:.1f} max]"
                if sdk_lag.get("n")
                else "",
                "",
                f"{lag['n']} ticks",
            )
        floor, sdk_floor = s["floor_loop_lag_s"], s["sdk_floor_loop_lag_s"]
        if floor.get("n"):
            table.add_row(
                "  same, idle sibling process (floor)",
                f"{floor['p99'] * 1000:.1f} [{floor['max'] * 1000:.1f} max]",
                f"{sdk_floor['p99'] * 1000:.1f} [{sdk_floor['max'] * 1000:.1f} max]"
                if sdk_floor.get("n")
                else "",
                "",
                f"{floor['n']} ticks",
            )
        conc = s["concurrency"]
        table.add_row(
            f"wall: {conc['n']} concurrent vs 1",
            f"{_ms(conc['multi_wall_s'])} vs {_ms(conc['single_wall_s'])}",
            f"{_ms(s['sdk_multi_wall_s'])} ({conc['n']} at once)"
            if s["sdk_multi_wall_s"].get("n")
            else "",
            "",
            "-" if conc["ratio"] is None else f"{conc['ratio']:.2f}x",
        )
        console.print(table)
        for t in s["targets"]:
            value = t["value"]
            shown = (
                "-"
                if value is None
                else (f"{value:.3f}x" if t["unit"] == "x" else f"{value * 1000:.1f} ms")
            )
            limit = f"{t['limit']}x" if t["unit"] == "x" else f"{t['limit'] * 1000:.0f} ms"
            colour = {"PASS": "green", "MISS": "red"}.get(t["status"], "yellow")
            console.print(
                f"  [{colour}]{t['status']}[/{colour}] {product}: {t['target']}: {shown} "
                f"(target {limit})"
            )
        ab = s.get("supervised_vs_plain")
        if ab:
            plain = e2e[PLAIN]
            console.print(
                f"  dsh without supervisors, in the same trios: end to end {_ms(plain['total_s'])}"
                f" ms, parent CPU {_ms(plain['cpu_s'])} ms; supervised / plain, median of"
                f" per-trio ratios: end to end {ab['total_s']:.3f}x, time to answer"
                f" {ab['answer_s']:.3f}x, parent CPU {ab['cpu_s']:.3f}x"
            )
        watched = s.get("watched_vs_dsh")
        if watched:
            console.print(
                f"  dsh with the limits' watchdog armed, in the same trios: parent CPU"
                f" {_ms(e2e[WATCHED]['cpu_s'])} ms ({s['watchdog_cpu_ms']:+.2f} ms vs dsh);"
                f" watched / dsh, median of per-trio ratios: end to end"
                f" {watched['total_s']:.3f}x, parent CPU {watched['cpu_s']:.3f}x"
            )
        if s["late_tree_exits"]:
            console.print(f"  [red]trees outlived their close: {s['late_tree_exits']}[/red]")
        for error in s["errors"]:
            console.print(f"  [red]error: {error}[/red]")
