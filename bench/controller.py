"""The controller against the baselines on every shipped scenario.

    .venv/bin/python -m bench.controller [--markdown]

Prints the suite table (all four policies side by side), the target checks, and how long the
simulations took. Exits 1 if a target fails.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

from pacer.config import load_settings
from pacer.sim import table
from pacer.sim.suite import check_targets, run_suite


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="Markdown tables")
    args = parser.parse_args()
    settings = load_settings()
    started = time.perf_counter()
    reports = run_suite(
        settings,
        progress=lambda i, n, r: print(f"[{i}/{n}] {r.scenario} / {r.policy}", file=sys.stderr),
    )
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
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
