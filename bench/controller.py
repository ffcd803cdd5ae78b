"""The controller against the baselines on every shipped scenario.

    .venv/bin/python -m bench.controller [--markdown] [--seeds N]

Prints the suite table (every policy side by side), the target checks, and how long the
simulations took. With --seeds N it also reruns every policy on N − 1 other seeds of each
scenario and prints, per target, on how many seeds it held. Exits 1 if a target fails on the
shipped seeds.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections import defaultdict

from pacer.cli.table import render
from pacer.config import Settings, load_settings
from pacer.sim import table
from pacer.sim.report import Report
from pacer.sim.suite import Finding, check_targets, run_suite


def _progress(i: int, n: int, r: Report) -> None:
    print(f"[{i}/{n}] {r.scenario} / {r.policy}", file=sys.stderr)


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="Markdown tables")
    parser.add_argument(
        "--seeds", type=int, default=1, metavar="N", help="also sweep N seeds (default 1: off)"
    )
    args = parser.parse_args()
    settings = load_settings()
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
