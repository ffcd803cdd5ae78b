"""The tables `pacer simulate` prints."""

from __future__ import annotations

from collections.abc import Sequence

from pacer.cli.table import render
from pacer.sim.report import Report
from pacer.sim.scenario import Scenario
from pacer.sim.suite import Finding


def _opt(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def single(report: Report) -> str:
    """One run as a two-column table of metric, value."""
    r = report
    rows: list[tuple[str, str]] = [
        ("scenario", r.scenario),
        ("policy", r.policy),
        ("simulated", f"{r.simulated_s:.0f} s"),
        ("partitions completed", str(r.partitions_completed)),
        ("GPU busy ratio", f"{r.gpu_busy_ratio:.4f}"),
        ("steady GPU busy ratio", f"{r.steady_gpu_busy_ratio:.4f}"),
        ("throughput", f"{r.throughput_partitions_per_s:.4f} partitions/s"),
        (
            "bound",
            f"{r.bound_throughput_partitions_per_s:.4f} partitions/s ({r.bottleneck}); "
            f"{r.throughput_partitions_per_s / r.bound_throughput_partitions_per_s:.3f} of it",
        ),
        (
            "peak in flight",
            f"{r.peak_inflight_partitions} partitions, {r.peak_inflight_bytes / 2**30:.0f} GiB",
        ),
        ("mean in flight", f"{r.mean_inflight_partitions:.1f} partitions"),
        ("Little's-law minimum in flight", f"{r.little_min_inflight:.1f} partitions"),
        ("peak ready", f"{r.peak_ready} partitions"),
        ("time to first GPU work", _opt(r.time_to_first_gpu_s, ".1f") + " s"),
        ("time to steady (busy >= 0.95)", _opt(r.time_to_steady_s, ".1f") + " s"),
        ("idle gap p99", f"{r.idle_gap_p99_s:.2f} s"),
        ("bootstraps / re-bootstraps", f"{r.bootstraps} / {r.rebootstraps}"),
        ("budget violations", str(r.budget_violations)),
        *(
            (f"busy again after t={rec.at_s:g} s", _opt(rec.after_s, ".1f") + " s")
            for rec in r.recoveries
        ),
    ]
    return render(["metric", "value"], rows)


SUITE_HEADERS = (
    "scenario", "policy", "bound by", "busy", "steady busy", "thr/bound", "mean inflight",
    "peak inflight", "Little min", "peak ready", "t steady s", "recovery s", "gap p99 s",
    "reboots", "violations",
)  # fmt: skip


def _recovery(r: Report) -> str:
    """The slowest recovery after a disturbance ("never" if one never came), "-" if none."""
    if not r.recoveries:
        return "-"
    if any(rec.after_s is None for rec in r.recoveries):
        return "never"
    return f"{max(rec.after_s or 0.0 for rec in r.recoveries):.1f}"


SUITE_GROUPS = (
    ("GPU use", ("bound by", "busy", "steady busy", "thr/bound", "gap p99 s")),
    ("memory in flight", ("mean inflight", "peak inflight", "Little min", "peak ready")),
    ("recovery and budget", ("t steady s", "recovery s", "reboots", "violations")),
)  # fmt: skip
"""The suite's columns for a terminal: a table per group, each after scenario and policy, so that
none is wider than 100 columns (`suite`)."""


def suite(reports: Sequence[Report], markdown: bool = False) -> str:
    """All runs side by side, one row per scenario and policy: one table of every column in
    Markdown, a table per `SUITE_GROUPS` group on a terminal."""
    rows = [
        (
            r.scenario,
            r.policy,
            r.bottleneck,
            f"{r.gpu_busy_ratio:.4f}",
            f"{r.steady_gpu_busy_ratio:.4f}",
            f"{r.throughput_partitions_per_s / r.bound_throughput_partitions_per_s:.3f}",
            f"{r.mean_inflight_partitions:.1f}",
            r.peak_inflight_partitions,
            f"{r.little_min_inflight:.1f}",
            r.peak_ready,
            _opt(r.time_to_steady_s, ".0f"),
            _recovery(r),
            f"{r.idle_gap_p99_s:.2f}",
            r.rebootstraps,
            r.budget_violations,
        )
        for r in reports
    ]
    if markdown:
        return render(SUITE_HEADERS, rows, markdown=True)
    tables = []
    for title, headers in SUITE_GROUPS:
        columns = [0, 1, *(SUITE_HEADERS.index(h) for h in headers)]
        picked = [[row[i] for i in columns] for row in rows]
        tables.append(f"{title}:\n" + render([SUITE_HEADERS[i] for i in columns], picked))
    return "\n\n".join(tables)


def findings(items: Sequence[Finding], markdown: bool = False) -> str:
    rows = [(f.scenario, f.target, "pass" if f.passed else "FAIL", f.detail) for f in items]
    return render(("scenario", "target", "result", "measured"), rows, markdown=markdown)


def scenarios(items: Sequence[Scenario]) -> str:
    """Each scenario's name and one-line description."""
    return render(("scenario", "description"), [(s.name, s.description) for s in items])
