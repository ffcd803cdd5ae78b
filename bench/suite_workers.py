"""The full suite's two pytest-xdist workers: when each finishes, under one distribution mode
or another, runs interleaved (A B A B …).

    .venv/bin/python -m bench.suite_workers [--modes load,worksteal] [--repeats N]

Each run is ``pytest -q -n 2 --dist MODE`` with this module loaded as a plugin. In the
controlling process the plugin takes each test phase's report (its worker, start and stop
times, s since the epoch) and writes them to the JSON file ``SUITE_WORKERS_OUT`` names.
The table gives, per run: the suite's wall time, each worker's seconds in tests and the time
it finished (from the first test's start), and the gap between the two finishes, the time one
worker waited for the other. Then per mode the mean with its 95 % interval (Student's t).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.stats import interval

OUT_ENV = "SUITE_WORKERS_OUT"  # not PACER_: the services the tests start refuse those unknown
_phases: list[tuple[str, float, float]] = []  # (worker, start, stop) of each test phase


def pytest_runtest_logreport(report: Any) -> None:
    """In the controlling process: keep each phase's worker and times."""
    node = getattr(report, "node", None)
    if node is not None and os.environ.get(OUT_ENV):
        _phases.append((node.gateway.id, report.start, report.stop))


def pytest_sessionfinish(session: Any) -> None:
    path = os.environ.get(OUT_ENV)
    if path and _phases:
        Path(path).write_text(json.dumps(_phases))


def workers(phases: list[tuple[str, float, float]]) -> dict[str, tuple[float, float]]:
    """Per worker: (seconds in tests, when it finished after the first phase began).

    >>> workers([("gw0", 0.0, 2.0), ("gw1", 0.5, 1.0), ("gw0", 2.0, 3.0)])
    {'gw0': (3.0, 3.0), 'gw1': (0.5, 1.0)}
    """
    began = min(start for _, start, _ in phases)
    out: dict[str, tuple[float, float]] = {}
    for worker, start, stop in phases:
        busy, finished = out.get(worker, (0.0, 0.0))
        out[worker] = (busy + stop - start, max(finished, stop - began))
    return dict(sorted(out.items()))


def run_once(mode: str) -> tuple[float, int, dict[str, tuple[float, float]], list[str]]:
    """One run of the suite under ``mode``: (wall s, exit status, `workers`, the lines of
    pytest's summary that name a test failed)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "phases.json"
        command = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", mode,
                   "-p", "bench.suite_workers", "-p", "no:cacheprovider"]  # fmt: skip
        start = time.monotonic()
        done = subprocess.run(command, capture_output=True, check=False, text=True,
                              env={**os.environ, OUT_ENV: str(out)})  # fmt: skip
        wall = time.monotonic() - start
        phases = json.loads(out.read_text()) if out.exists() else []
    failed = [line for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return wall, done.returncode, workers([tuple(p) for p in phases]) if phases else {}, failed


def shown(values: list[float]) -> str:
    """Mean ± half its 95 % interval (`bench.stats.interval`), or the value alone for one."""
    mean, half = interval(values)
    return f"{mean:.1f} ± {half:.1f}" if len(values) > 1 else f"{mean:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--modes", default="load,worksteal",
                        help="xdist distribution modes, comma-separated, run in turn")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=3, help="runs of each mode (count)")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    print("| run | mode | wall s | gw0 in tests s | gw0 done s | gw1 in tests s | gw1 done s "
          "| finishes apart s | exit |")  # fmt: skip
    print("|----:|------|-------:|---------------:|-----------:|---------------:|-----------:"
          "|-----------------:|-----:|")  # fmt: skip
    walls: dict[str, list[float]] = {mode: [] for mode in modes}
    apart: dict[str, list[float]] = {mode: [] for mode in modes}
    failures: list[str] = []
    for n in range(args.repeats):
        for mode in modes:
            wall, status, seen, failed = run_once(mode)
            failures += [f"run {n + 1} ({mode}): {line}" for line in failed]
            cells = [f"{busy:.1f} | {done:.1f}" for busy, done in seen.values()]
            finished = [done for _, done in seen.values()]
            gap = max(finished) - min(finished) if len(finished) == 2 else float("nan")
            walls[mode].append(wall)
            apart[mode].append(gap)
            print(f"| {n + 1} | {mode} | {wall:.1f} | {' | '.join(cells)} | {gap:.1f} "
                  f"| {status} |", flush=True)  # fmt: skip
    for line in failures:
        print(line)
    print()
    print("| mode | runs | wall s | finishes apart s |")
    print("|------|-----:|-------:|-----------------:|")
    for mode in modes:
        print(f"| {mode} | {len(walls[mode])} | {shown(walls[mode])} "
              f"| {shown(apart[mode])} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
