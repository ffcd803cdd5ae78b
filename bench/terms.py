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
from pacer.cli.table import render
from pacer.config import Settings
from pacer.control.controller import PIController
from pacer.sim.engine import RawRun, Simulation
from pacer.sim.policies import policy_factory
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
    """``raw``'s trace cut into ``count`` equal stretches of simulated time. Idle counts the
    live GPU workers without a partition; a stretch with no event in it is left out.
    Raises ValueError where ``count`` < 1 or the trace is empty."""
    if count < 1:
        raise ValueError(f"stretches must be >= 1, got {count}")
    trace = raw.trace
    if not trace.t:
        raise ValueError(f"{raw.scenario.name}: the run recorded no event")
    t = np.array(trace.t)
    held = np.diff(t, append=t[-1])  # each state lasts until the next event
    live, busy = np.array(trace.workers), np.array(trace.busy)
    ready, inflight = np.array(trace.ready), np.array(trace.inflight)
    synthesizing = np.array(trace.synthesizing)
    edges = np.linspace(t[0], t[-1], count + 1)
    out = []
    for start, end in itertools.pairwise(edges):
        mask = (t >= start) & ((t < end) | (end == edges[-1]))
        weight = held[mask]
        if not mask.any() or weight.sum() <= 0:
            continue
        capacity = float((live[mask] * weight).sum())
        idle = float(((live[mask] - busy[mask]).clip(min=0) * weight).sum())
        out.append(Stretch(float(start), float(end), idle / capacity if capacity else 0.0,
                           float(np.average(ready[mask], weights=weight)), int(ready[mask].min()),
                           float(np.average(inflight[mask], weights=weight)),
                           float(np.average(synthesizing[mask], weights=weight))))  # fmt: skip
    return out


def terms_rows(scenario: Scenario, settings: Settings, every_s: float) -> list[tuple[str, ...]]:
    """pi on ``scenario``, read at its decisions at most once every ``every_s`` simulated
    seconds: rows of ``TERM_HEADERS``."""
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

    Simulation(scenario, "pi", watched_pi(scenario, settings, watch)).run()
    return rows


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
    parser.add_argument("--every", type=float, default=0.0,
                        help="s between pi's rows (default: a sixtieth of the run)")  # fmt: skip
    parser.add_argument("--stretches", type=int, default=10, help="stretches of the run")
    parser.add_argument("--policies", default="pi,unpaced", help="policies to cut in stretches")
    parser.add_argument("--markdown", action="store_true", help="tables in Markdown")
    args = parser.parse_args(argv)
    if (args.scenario is None) == (args.drawn is None):
        parser.error("name a scenario or --drawn CLASS:SEED:INDEX, not both")
    if args.stretches < 1:
        parser.error(f"--stretches must be >= 1, got {args.stretches}")
    try:
        if args.drawn:
            scenario = drawn_host(args.drawn)
        else:
            scenario = load_scenario(scenario_path(args.scenario))
    except (ValueError, ScenarioError) as exc:
        parser.error(str(exc))
    settings = Settings()
    print(describe(scenario))
    rows = []
    for policy in [p for p in args.policies.split(",") if p]:
        try:
            factory = policy_factory(policy, scenario, settings)
        except ValueError as exc:
            parser.error(f"--policies: {exc}")
        raw = Simulation(scenario, policy, factory).run()
        rows += [(policy, f"{s.start_s:.0f}", f"{s.end_s:.0f}", f"{s.idle:.4f}", f"{s.ready:.1f}",
                  str(s.least_ready), f"{s.inflight:.1f}", f"{s.synthesizing:.1f}")
                 for s in stretches(raw, args.stretches)]  # fmt: skip
    print(render(STRETCH_HEADERS, rows, markdown=args.markdown))
    print()
    every = args.every or scenario.duration_s / 60
    print(render(TERM_HEADERS, terms_rows(scenario, settings, every), markdown=args.markdown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
