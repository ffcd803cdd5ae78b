"""What a ready buffer sized from the spread of synthesis times would buy, and cost.

    .venv/bin/python -m bench.setpoint_spread [--seeds 3] [--z 0,1,2] [--markdown]

pi with its setpoint raised to λ̂ · z · σ̂syn (a base-stock safety stock against the spread of
synthesis times, the larger of it and the setpoint as shipped; z = 0 is pi as shipped), on the
GPU-bound synthesis slowdown and on the two heavy-tailed hosts. Prints, per z and scenario,
the means over ``--seeds`` seeds (the suite's sweep: seed + 101·k) of the busy ratio and the
mean in flight. The setpoint is patched for the run only; nothing ships it.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from bench.usage import doc_parser
from pacer.cli.table import render
from pacer.config import Settings
from pacer.control.model import Model
from pacer.sim.scenario import load_scenario, scenario_path
from pacer.sim.suite import run_policy

SCENARIOS = ("synthesis-slowdown-gpu-bound", "heavy-tail", "bimodal-partitions")


@contextmanager
def spread_setpoint(z: float) -> Iterator[None]:
    """Within the block, pi's setpoint is at least λ̂ · z · σ̂syn."""
    shipped = Model.setpoint

    def setpoint(self: Model, base_interval_s: float) -> float:
        q = shipped(self, base_interval_s)
        if not math.isfinite(1 / base_interval_s):
            return q
        return max(q, z * self.estimator.synthesis_sd_s / base_interval_s)

    Model.setpoint = setpoint  # type: ignore[method-assign]
    try:
        yield
    finally:
        Model.setpoint = shipped  # type: ignore[method-assign]


def main() -> int:
    parser = doc_parser(__doc__)
    parser.add_argument("--seeds", type=int, default=3, help="seeds per scenario (3)")
    parser.add_argument("--z", default="0,1,2", help="standard deviations of synthesis time")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    settings = Settings()
    rows = []
    for z in (float(v) for v in args.z.split(",")):
        row = [f"{z:g}"]
        with spread_setpoint(z):
            for name in SCENARIOS:
                base = load_scenario(scenario_path(name))
                busy, mean = [], []
                for k in range(args.seeds):
                    sc = base.model_copy(update={"seed": base.seed + 101 * k})
                    _, r = run_policy(sc, "pi", settings)
                    busy.append(r.gpu_busy_ratio)
                    mean.append(r.mean_inflight_partitions)
                row += [f"{statistics.fmean(busy):.4f}", f"{statistics.fmean(mean):.1f}"]
        print(f"z={z:g}: done", file=sys.stderr)
        rows.append(tuple(row))
    headers = ["z"]
    for name in SCENARIOS:
        headers += [f"{name}: busy", f"{name}: mean in flight"]
    print(f"pi with q* >= λ̂·z·σ̂syn, {args.seeds} seeds")
    print(render(tuple(headers), rows, markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
