"""One run read closely: pi's terms as it decides, and where the GPUs idled, stretch by stretch.

    .venv/bin/python -m bench.terms h200                       # a shipped scenario or a TOML file
    .venv/bin/python -m bench.terms --drawn bimodal:5:0        # host 0 of bimodal, --seed 5
    .venv/bin/python -m bench.terms --drawn bimodal:5:0 --every 3 --stretches 10 \\
                                    --policies pi,unpaced [--markdown]

The suite and `bench.classes` say whether pi met a target on a host; this says why. It runs the
host once per policy (``--policies``) and splits each run into ``--stretches`` equal stretches
of simulated time: the share of GPU time idle in each, the ready queue's mean and least depth,
and the mean in flight and in synthesis. Then pi's run again, read at its decisions (once every
``--every`` simulated seconds at most, through `bench.watch.watched_pi`): its mode, T̂syn,
T̂gpu, the lead time and the live floor, the slowdown the survival check found, the setpoint q*,
the projected ready depth q̃ and its mismatch ε̄, and the dispatch rate over the feed-forward.
These are the terms `/v1/controller` and the metrics show. A diagnostic: it changes nothing in
the run.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench.classes import CLASSES, describe, drawn
from bench.watch import watched_pi
from pacer.cli.args import count, seconds
from pacer.cli.table import render
from pacer.config import Settings
from pacer.control.controller import PIController
from pacer.sim.engine import RawRun, Simulation
from pacer.sim.policies import POLICIES, policy_factory
from pacer.sim.report import Cumulative
from pacer.sim.scenario import Scenario, ScenarioError, load_scenario, scenario_path

STRETCH_HEADERS = ("policy", "from s", "to s", "GPU idle", "ready, mean", "ready, least",
                   "in flight", "in synthesis")  # fmt: skip
TERM_HEADERS = ("t s", "mode", "T̂syn s", "T̂gpu s", "lead s", "floor s", "slowdown", "q*",
                "q̃", "ε̄", "rate ÷ ff")  # fmt: skip


@dataclass(frozen=True)
class Stretch:
    """One stretch of a run: [start_s, end_s), the share of GPU-worker time idle, and the
    time-weighted means (and the least ready depth) of the pipeline's counts (partitions)."""

    start_s: float
    end_s: float
    idle: float
    ready: float
    least_ready: int
    inflight: float
    synthesizing: float


def stretches(raw: RawRun, count: int) -> list[Stretch]:
    """``raw``'s trace cut into ``count`` equal stretches of simulated time. Idle is counted
    as the run's busy ratio counts it (`pacer.sim.report`): live GPU workers without a
    partition while work is outstanding. Raises ValueError where ``count`` < 1 or the trace
    holds no time."""
    if count < 1:
        raise ValueError(f"stretches must be >= 1, got {count}")
    trace = raw.trace
    t = np.asarray(trace.t)
    if len(t) < 2 or t[-1] <= t[0]:
        raise ValueError(f"{raw.scenario.name}: the run recorded no time")
    available = np.asarray(trace.available, dtype=float)
    capacity = Cumulative(t, available * np.asarray(trace.workers, dtype=float))
    busy = Cumulative(t, np.asarray(trace.busy, dtype=float))
    ready = np.asarray(trace.ready)
    means = [Cumulative(t, np.asarray(v, dtype=float))
             for v in (trace.ready, trace.inflight, trace.synthesizing)]  # fmt: skip
    out = []
    for start, end in itertools.pairwise(np.linspace(t[0], t[-1], count + 1)):
        span = end - start
        held = float(capacity(end) - capacity(start))
        idle = max(0.0, 1 - float(busy(end) - busy(start)) / held) if held > 0 else 0.0
        # The state held at the stretch's start, and every state that begins within it.
        first = max(0, int(np.searchsorted(t, start, side="right")) - 1)
        last = max(first + 1, int(np.searchsorted(t, end, side="left")))
        mean_ready, inflight, synthesizing = (float(m(end) - m(start)) / span for m in means)
        out.append(Stretch(float(start), float(end), idle, mean_ready,
                           int(ready[first:last].min()), inflight, synthesizing))  # fmt: skip
    return out


def terms_rows(
    scenario: Scenario, settings: Settings, every_s: float
) -> tuple[list[tuple[str, ...]], RawRun]:
    """pi on ``scenario``, read at its decisions at most once every ``every_s`` simulated
    seconds: rows of ``TERM_HEADERS``, and the run (the watch changes nothing in it)."""
    rows: list[tuple[str, ...]] = []
    last = [-float("inf")]

    def watch(now: float, pi: PIController) -> None:
        if now - last[0] < every_s:
            return
        last[0] = now
        t, est = pi.terms, pi.estimates
        rows.append((f"{now:.1f}", t.mode.value, f"{est.synthesis_s or 0.0:.2f}",
                     f"{est.gpu_service_s or 0.0:.3f}", f"{t.lead_s:.2f}", f"{t.floor_s:.2f}",
                     f"{t.slowdown:.2f}", f"{t.setpoint:.1f}", f"{t.projected_ready:.1f}",
                     f"{t.mismatch:.1f}", f"{t.multiplier:.2f}"))  # fmt: skip

    raw = Simulation(scenario, "pi", watched_pi(scenario, settings, watch)).run()
    return rows, raw


def drawn_host(spec: str) -> Scenario:
    """The host ``CLASS:SEED:INDEX`` names, as `bench.classes --seed SEED` draws it. Raises
    ValueError naming ``--drawn`` and the rule where ``spec`` is not of that form."""
    parts = spec.split(":")
    rule = f"--drawn: CLASS:SEED:INDEX, CLASS one of {', '.join(CLASSES)}; got {spec!r}"
    if len(parts) != 3 or parts[0] not in CLASSES:
        raise ValueError(rule)
    try:
        seed, index = int(parts[1]), int(parts[2])
    except ValueError:
        raise ValueError(rule) from None
    if index < 0:
        raise ValueError(rule)
    return drawn(parts[0], index, seed)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="?", help="a shipped scenario's name or a TOML file")
    parser.add_argument("--drawn", metavar="CLASS:SEED:INDEX",
                        help="a host bench.classes draws instead (bimodal:5:0)")  # fmt: skip
    parser.add_argument("--every", type=seconds,
                        help="s between pi's rows (default: a sixtieth of the run)")  # fmt: skip
    parser.add_argument("--stretches", type=count(1), default=10, help="stretches of the run")
    parser.add_argument("--policies", default="pi,unpaced", help="policies to cut in stretches")
    parser.add_argument("--markdown", action="store_true", help="tables in Markdown")
    args = parser.parse_args(argv)
    if (args.scenario is None) == (args.drawn is None):
        parser.error("name a scenario or --drawn CLASS:SEED:INDEX, not both")
    policies = [p for p in args.policies.split(",") if p]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        parser.error(f"--policies: unknown {', '.join(unknown)}; one or more of "
                     f"{', '.join(POLICIES)}")  # fmt: skip
    try:
        if args.drawn:
            scenario = drawn_host(args.drawn)
        else:
            scenario = load_scenario(scenario_path(args.scenario))
    except (ValueError, ScenarioError) as exc:
        parser.error(str(exc))
    settings = Settings()
    print(describe(scenario))
    terms, watched = terms_rows(scenario, settings, args.every or scenario.duration_s / 60)
    rows = []
    for policy in policies:
        raw = watched if policy == "pi" else Simulation(
            scenario, policy, policy_factory(policy, scenario, settings)).run()  # fmt: skip
        rows += [(policy, f"{s.start_s:.0f}", f"{s.end_s:.0f}", f"{s.idle:.4f}", f"{s.ready:.1f}",
                  str(s.least_ready), f"{s.inflight:.1f}", f"{s.synthesizing:.1f}")
                 for s in stretches(raw, args.stretches)]  # fmt: skip
    print(render(STRETCH_HEADERS, rows, markdown=args.markdown))
    print()
    print(render(TERM_HEADERS, terms, markdown=args.markdown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
