"""The controller against the baselines on every shipped scenario, and what a decision costs.

    .venv/bin/python -m bench.controller [--markdown] [--seeds N] [--cost-only] [--workers W]

Prints the suite table (every policy side by side), the target checks, how long the
simulations took, and the cost of one decision (``decide()``) of pi and of unpaced on a host
of W GPU workers (default 1,000): mean, p50, p99 and max over every decision of a simulated
run, timed alone, on the wall clock and in CPU time. With --seeds N it also reruns every
policy on N − 1 other seeds of each scenario and prints, per target, on how many seeds it held.
Exits 1 if a target fails on the shipped seeds.
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence

from pacer.cli.table import render
from pacer.config import Settings, load_settings
from pacer.control.policy import Decision, DispatchPolicy, Observation
from pacer.sim import table
from pacer.sim.engine import Simulation, VirtualClock
from pacer.sim.policies import policy_factory
from pacer.sim.report import Report
from pacer.sim.scenario import Scenario
from pacer.sim.suite import Finding, check_targets, run_suite

COST_SIMULATED_S = 2.0  # simulated seconds of the wide host whose decisions are timed


def _progress(i: int, n: int, runs: Sequence[Report]) -> None:
    print(f"[{i}/{n}] {runs[0].scenario}: {len(runs)} runs", file=sys.stderr)


def seed_sweep(settings: Settings, seeds: int, markdown: bool) -> str:
    """Per scenario and target: on how many of ``seeds`` seeds pi met it, and the failures."""
    held: dict[tuple[str, str], list[Finding]] = defaultdict(list)
    for k in range(seeds):
        reports = run_suite(settings, reseed=k)
        for f in check_targets(reports, settings):
            held[(f.scenario, f.target)].append(f)
        print(f"seed set {k + 1}/{seeds} done", file=sys.stderr)
    rows = []
    for (scenario, target), items in held.items():
        failed = [f.detail for f in items if not f.passed]
        rows.append(
            (scenario, target, f"{len(items) - len(failed)}/{len(items)}", "; ".join(failed))
        )
    return render(("scenario", "target", "held", "failures"), rows, markdown=markdown)


def wide_host(workers: int) -> Scenario:
    """``workers`` GPU workers at 80 ms fed by 8 cores each at 0.4 s: wide-host scaled."""
    return Scenario.model_validate({
        "name": f"cost-{workers}", "duration_s": COST_SIMULATED_S, "seed": 1,
        "gpu": {"workers": workers,
                "service_s": {"dist": "lognormal", "median": 0.08, "sigma": 0.1}},
        "synthesis": {"duration_s": {"dist": "lognormal", "median": 0.4, "sigma": 0.2},
                      "threads_per_synthesis": 1, "cores": 8 * workers},
        "partition": {"bytes": 1}, "memory": {"budget_bytes": 10 * workers},
        "jobs": {"partitions_per_job": 1000,
                 "arrival": {"kind": "backlog", "jobs": 50 * workers // 1000 + 1}},
    })  # fmt: skip


def decision_cost(policy: str, workers: int, settings: Settings) -> tuple[list[float], list[float]]:
    """Seconds each ``decide()`` of ``policy`` took over a simulated run of ``wide_host``,
    on the wall clock and in the thread's CPU time: the call alone, timed with the garbage
    collector paused around it. On a shared machine the wall clock also counts the time the
    thread waited for a core; the CPU time does not."""
    scenario = wide_host(workers)
    factory = policy_factory(policy, scenario, settings)
    times: list[float] = []
    cpu: list[float] = []

    def timed(clock: VirtualClock) -> DispatchPolicy:
        inner = factory(clock)
        decide = inner.decide

        def measured(obs: Observation) -> Decision:
            gc.disable()
            started, started_cpu = time.perf_counter(), time.thread_time()
            decision = decide(obs)
            times.append(time.perf_counter() - started)
            cpu.append(time.thread_time() - started_cpu)
            gc.enable()
            return decision

        inner.decide = measured  # type: ignore[method-assign]
        return inner

    Simulation(scenario, policy, timed).run()
    return times, cpu


def render_cost(workers: int, settings: Settings, markdown: bool) -> str:
    rows = []
    for policy in ("pi", "unpaced"):
        wall, cpu = (sorted(t) for t in decision_cost(policy, workers, settings))
        n = len(wall)
        rows.append((policy, n, f"{statistics.fmean(wall) * 1e6:.1f}",
                     f"{wall[n // 2] * 1e6:.1f}", f"{wall[int(0.99 * n)] * 1e6:.1f}",
                     f"{wall[-1] * 1e6:.0f}", f"{statistics.fmean(cpu) * 1e6:.1f}",
                     f"{cpu[int(0.99 * n)] * 1e6:.1f}", f"{cpu[-1] * 1e6:.0f}"))  # fmt: skip
    headers = ("policy", "decisions", "mean µs", "p50 µs", "p99 µs", "max µs", "CPU mean µs",
               "CPU p99 µs", "CPU max µs")  # fmt: skip
    return render(headers, rows, markdown=markdown)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="Markdown tables")
    parser.add_argument(
        "--seeds", type=int, default=1, metavar="N", help="also sweep N seeds (default 1: off)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1000,
        metavar="W",
        help="GPU workers of the host whose decisions are timed (1000)",
    )
    parser.add_argument("--cost-only", action="store_true",
                        help="only time the decisions, run no scenario")  # fmt: skip
    args = parser.parse_args()
    settings = load_settings()
    cost = render_cost(args.workers, settings, args.markdown)
    print(f"Cost of a decision, {args.workers} GPU workers ({COST_SIMULATED_S:g} simulated s "
          f"of wide-host scaled; {platform.python_implementation()} "
          f"{platform.python_version()}):\n")  # fmt: skip
    print(cost)
    print()
    if args.cost_only:
        return 0
    started = time.perf_counter()
    reports = run_suite(settings, progress=_progress)
    elapsed = time.perf_counter() - started
    findings = check_targets(reports, settings)
    simulated_h = sum(r.simulated_s for r in reports) / 3600
    print(table.suite(reports, markdown=args.markdown))
    print()
    print(table.findings(findings, markdown=args.markdown))
    print()
    print(
        f"{len(reports)} runs, {simulated_h:.1f} simulated hours in {elapsed:.1f} s wall "
        f"({platform.python_implementation()} {platform.python_version()}, "
        f"{platform.machine()})"
    )
    failed = [f for f in findings if not f.passed]
    print(f"targets: {len(findings) - len(failed)}/{len(findings)} pass")
    if args.seeds > 1:
        print()
        print(f"Seed sweep: shipped seed + 101·k, k = 0..{args.seeds - 1}")
        print()
        print(seed_sweep(settings, args.seeds, args.markdown))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
