"""How well any policy could do after a GPU-bound synthesis slowdown: an oracle's bound.

    .venv/bin/python -m bench.slowdown_bound [--seeds 10] [--extras 8,20,40] [--scale 5]
                                             [--sigma 0.2] [--arms pi,unpaced] [--called]
                                             [--markdown]

On the shipped ``synthesis-slowdown-gpu-bound`` (synthesis five times slower from t = 200 s,
the GPUs still the bottleneck; ``--scale`` sets another factor, ``--sigma`` the lognormal
spread of synthesis times in place of 0.2), an oracle keeps a fixed number in flight, Little's
law plus ``extra``, and moves to the new regime's number at the very moment of the slowdown:
no estimate to learn, no refill to pace. It bounds what a causal
controller holding as much memory can reach. Beside it, ``--arms``: pi (the defaults) and
unpaced (``--extras none``: no oracle). Prints, per policy, the means over ``--seeds`` seeds
(the suite's sweep: seed + 101·k) of the busy ratio and the mean in flight, the most in
flight on any seed, the slowest recovery (busy again, in lead times of the new regime), the
seeds busy again within two lead times, and each seed's recovery. With ``--called``, pi's
decisions are watched (``bench.watch``), and a line after the table gives, by seed, how many
seconds after the slowdown pi's terms first showed it (``slowdown`` above 1: the survival check
called it; "-" where it never did).
"""

from __future__ import annotations

import functools
import math
import statistics
import sys
from collections.abc import Callable

from bench.usage import doc_parser
from bench.variants import _changed
from bench.watch import watched_pi
from pacer.cli.table import render
from pacer.config import Settings
from pacer.control.baselines import FixedConcurrency
from pacer.control.controller import PIController
from pacer.control.policy import Decision, Observation
from pacer.sim.engine import PolicyFactory, Simulation
from pacer.sim.policies import policy_factory
from pacer.sim.report import summarize
from pacer.sim.scenario import Scenario, load_scenario, scenario_path


class Oracle(FixedConcurrency):
    """``before`` in flight until ``at_s`` on ``clock``, ``after`` from then on."""

    def __init__(self, clock: Callable[[], float], before: int, after: int, at_s: float,
                 memory_slots: int) -> None:  # fmt: skip
        super().__init__(before, memory_slots)
        self._clock, self._after, self._at_s = clock, after, at_s

    def decide(self, obs: Observation) -> Decision:
        if self._clock() >= self._at_s:
            self._concurrency = self._after
        return super().decide(obs)


def oracle(scenario: Scenario, extra: int) -> PolicyFactory:
    """Little's law of each regime (GPU-bound: the GPUs' rate × synthesis and GPU time), plus
    ``extra``."""
    regimes = scenario.regimes()
    before, after = regimes[0], regimes[1]
    rate = before.bounds["gpu"]
    depth = [math.ceil(rate * (r.synthesis_s + r.gpu_s) + extra) for r in (before, after)]
    return lambda clock: Oracle(clock, depth[0], depth[1], after.start_s, scenario.memory_slots)


def _policy(scenario: Scenario, *, name: str, settings: Settings) -> PolicyFactory:
    return policy_factory(name, scenario, settings)


def _called(scenario: Scenario, *, settings: Settings, calls: list[float | None]) -> PolicyFactory:
    """pi, watched: appends to ``calls`` how many seconds after the slowdown its terms first
    showed one (``Terms.slowdown`` above 1), or None where they never did, once the run ends."""
    at_s = scenario.regimes()[1].start_s
    calls.append(None)
    index = len(calls) - 1

    def watch(now: float, pi: PIController) -> None:
        if calls[index] is None and now >= at_s and pi.terms.slowdown > 1:
            calls[index] = now - at_s

    return watched_pi(scenario, settings, watch)


def main() -> int:
    parser = doc_parser(__doc__)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--extras", default="8,20,40", help="the oracle's partitions beyond Little")
    parser.add_argument("--scale", type=float, default=None,
                        help="the slowdown's factor in place of the scenario's (5)")  # fmt: skip
    parser.add_argument("--sigma", type=float, default=None,
                        help="the synthesis times' lognormal sigma in place of 0.2")  # fmt: skip
    parser.add_argument("--arms", default="pi,unpaced", help="pacer's policies beside the oracle")
    parser.add_argument("--called", action="store_true",
                        help="when pi's terms first showed the slowdown, by seed")  # fmt: skip
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    base = load_scenario(scenario_path("synthesis-slowdown-gpu-bound"))
    changes: dict[str, object] = {}
    if args.scale is not None:
        scaled = (p.model_copy(update={"scale": args.scale}) for p in base.synthesis.phases)
        changes["phases"] = tuple(scaled)
    if args.sigma is not None:
        changes["duration_s"] = base.synthesis.duration_s.model_copy(update={"sigma": args.sigma})
    base = _changed(base, base.name, "synthesis", **changes)
    settings = Settings()
    arms: dict[str, Callable[[Scenario], PolicyFactory]] = {
        name: functools.partial(_policy, name=name, settings=settings)
        for name in args.arms.split(",")
        if name
    }
    calls: list[float | None] = []
    if args.called and "pi" in arms:
        arms["pi"] = functools.partial(_called, settings=settings, calls=calls)
    extras = [] if args.extras == "none" else [int(e) for e in args.extras.split(",")]
    for extra in extras:
        arms[f"oracle, Little + {extra}"] = functools.partial(oracle, extra=extra)
    rows = []
    for name, make in arms.items():
        busy, mean, peak, leads = [], [], [], []
        for k in range(args.seeds):
            sc = base.model_copy(update={"seed": base.seed + 101 * k})
            r = summarize(Simulation(sc, name, make(sc)).run())
            busy.append(r.gpu_busy_ratio)
            mean.append(r.mean_inflight_partitions)
            peak.append(r.peak_inflight_partitions)
            leads += [10.0 if x.after_s is None else x.after_s / x.lead_s for x in r.recoveries]
        print(f"{name}: done", file=sys.stderr)
        rows.append((name, f"{statistics.fmean(busy):.4f}", f"{min(busy):.4f}",
                     f"{statistics.fmean(mean):.1f}", str(max(peak)), f"{max(leads):.2f}",
                     f"{sum(x <= 2.0 for x in leads)} of {len(leads)}",
                     " ".join(f"{x:.2f}" for x in leads)))  # fmt: skip
    scale = base.synthesis.phases[0].scale
    sigma = getattr(base.synthesis.duration_s, "sigma", None)
    shape = "" if sigma is None else f", lognormal sigma {sigma:g}"
    print(f"synthesis-slowdown-gpu-bound, synthesis {scale:g} times slower{shape}, "
          f"{args.seeds} seeds")  # fmt: skip
    headers = (
        "policy",
        "busy (mean)",
        "busy (lowest)",
        "mean in flight",
        "most in flight",
        "slowest recovery (leads)",
        "within 2 leads",
        "recovery by seed (leads)",
    )
    print(render(headers, rows, markdown=args.markdown))
    if calls:
        shown = " ".join("-" if c is None else f"{c:.2f}" for c in calls)
        print(f"pi's terms first showed the slowdown, by seed (s after it): {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
