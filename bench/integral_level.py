"""Where pi's integral settles, against kp and ki, on the heavy-tailed hosts.

    python -m bench.integral_level [--seeds 3] [--scenarios heavy-tail,bimodal-partitions]

pi runs each scenario (seeds k = 0.., seed + 101·k, as ``bench.gains``) under each (kp, ki) of
``COMBOS``. After each decision it samples the I term (ki·∫e, partitions over a lead time) and
the filtered mismatch ε̄ of the Smith predictor (partitions: the ready depth observed less the
one projected a lead time earlier). The table gives their means over the second half of each
run, then over the seeds, with mean partitions in flight. Where P holds the projection near the
setpoint, the integral settles where it offsets P's pull: its level follows kp and the
mismatch, and ki sets only how soon it gets there.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from typing import Any

from bench.gains import HEAVY, _scenarios
from pacer.cli.table import render
from pacer.config import ControllerSettings, Settings
from pacer.sim.engine import Simulation
from pacer.sim.policies import policy_factory
from pacer.sim.report import summarize
from pacer.sim.scenario import Scenario

COMBOS = ((4.0, 0.1), (4.0, 0.25), (4.0, 1.0), (2.0, 0.1), (8.0, 0.1))  # (kp, ki)


def settled(scenario: Scenario, kp: float, ki: float) -> tuple[float, float, float]:
    """(I term, mismatch ε̄, mean in flight) of pi on ``scenario``: the first two as means
    over the run's second half (partitions)."""
    settings = Settings(controller=ControllerSettings(kp=kp, ki=ki))
    sim = Simulation(scenario, "pi", policy_factory("pi", scenario, settings))
    controller: Any = sim.policy
    samples: list[tuple[float, float, float]] = []
    decide = controller.decide

    def sampled(obs: Any) -> Any:
        decision = decide(obs)
        law = controller._pacing.law
        samples.append((sim.clock(), law.settings.ki * law.integral, law.mismatch))
        return decision

    controller.decide = sampled
    raw = sim.run()
    late = [(i, m) for t, i, m in samples if t > raw.end_s / 2]
    return (statistics.fmean(i for i, _ in late), statistics.fmean(m for _, m in late),
            summarize(raw).mean_inflight_partitions)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds of each scenario")
    parser.add_argument("--scenarios", default=",".join(HEAVY), help="comma-separated names")
    args = parser.parse_args(argv)
    rows = []
    for name in args.scenarios.split(","):
        scenarios = _scenarios([name], args.seeds)
        for kp, ki in COMBOS:
            runs = [settled(sc, kp, ki) for sc in scenarios]
            i_term, mismatch, inflight = (statistics.fmean(r[k] for r in runs) for k in range(3))
            rows.append([name, f"{kp:g}", f"{ki:g}", f"{i_term:+.2f}", f"{mismatch:+.2f}",
                         f"{i_term / (kp * mismatch):.2f}", f"{inflight:.2f}"])  # fmt: skip
            print(*rows[-1], flush=True)
    print(render(["scenario", "kp", "ki", "I term", "mismatch", "I ÷ (kp·mismatch)",
                  "mean in flight"], rows))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
