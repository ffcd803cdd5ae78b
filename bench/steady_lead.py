"""What the wander of pi's lead time costs on hosts drawn at random: pi beside pi with its lead
time held steady.

    .venv/bin/python -m bench.steady_lead [--draws 10] [--seed 2] [--jobs 2]
                                          [--classes heavy-tail,bimodal,outage]

pi's projection sinks λ̂ × lead: what the GPUs take while the partitions dispatched now are
synthesized. The lead time is T̂syn, lifted by the live floor while old syntheses run and by a
slowdown the survival check calls. A fixed concurrency has no such term; on quiet hosts it is
as busy as pi with less in flight. For each host drawn as `bench.classes` draws it, this runs
pi, then pi whose lead time is held, once its first ten mean syntheses are past, at the mean
pi's lead time had over the same span: the same controller, less the wander. Each arm is held
to the issue's memory target as the suite holds pi (`pacer.sim.suite.fixed_beside`): the fixed
concurrency below its mean in flight ÷ 1.05 must be less busy. A diagnostic: a held lead time
cannot follow a host that changes, so it is not a policy.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from bench.classes import draw_arguments, drawn_hosts
from pacer.config import Settings
from pacer.control.controller import PIController
from pacer.control.policy import Decision, DispatchPolicy, Observation
from pacer.sim.engine import PolicyFactory, Simulation, VirtualClock
from pacer.sim.policies import policy_factory
from pacer.sim.report import Report, summarize
from pacer.sim.scenario import Scenario
from pacer.sim.suite import fixed_beside, run_policy

WARM_SYNTHESES = 10  # the lead time is left alone until this many mean syntheses are past


def pi_arm(scenario: Scenario, settings: Settings, steady_s: float | None) -> tuple[Report, float]:
    """pi on ``scenario`` (its lead time held at ``steady_s`` after the warm-up, if given): its
    report and the time-weighted mean of its lead time after the warm-up (s)."""
    warm_s = WARM_SYNTHESES * scenario.synthesis.duration_s.mean
    seen: list[tuple[float, float]] = []

    def make(clock: VirtualClock) -> DispatchPolicy:
        policy = factory(clock)
        assert isinstance(policy, PIController)
        decide, lead_s = policy.decide, policy.lead_s

        def held() -> float:
            return steady_s if steady_s is not None and clock() >= warm_s else lead_s()

        def recorded(obs: Observation) -> Decision:
            decision = decide(obs)
            if clock() >= warm_s:
                seen.append((clock(), policy.terms.lead_s))
            return decision

        # This run's controller only: its lead time held, its decisions watched.
        policy.__dict__.update(lead_s=held, decide=recorded)
        return policy

    factory: PolicyFactory = policy_factory("pi", scenario, settings)
    report = summarize(Simulation(scenario, "pi", make).run())
    times = np.array([t for t, _ in seen])
    leads = np.array([lead for _, lead in seen])
    weights = np.diff(times, append=times[-1]) if times.size else times
    mean = float(np.sum(leads * weights) / np.sum(weights)) if np.sum(weights) > 0 else math.nan
    return report, mean


def held_to(
    scenario: Scenario, settings: Settings, report: Report, busy_at: dict[int, float]
) -> tuple[int, float]:
    """The fixed concurrency the suite holds ``report`` to (`fixed_beside`: below its mean in
    flight ÷ 1.05), and its busy ratio: from ``busy_at`` (concurrency → busy ratio) where that
    concurrency ran already on ``scenario``, else run and kept there."""
    _, less = fixed_beside(report, scenario)
    if less not in busy_at:
        busy_at[less] = run_policy(scenario, "fixed", settings, less)[1].gpu_busy_ratio
    return less, busy_at[less]


def host_line(scenario: Scenario) -> tuple[str, list[tuple[float, float, bool]]]:
    """One host: a line of text, and per arm (busy, mean in flight, target missed)."""
    settings = Settings()
    pi, mean_lead = pi_arm(scenario, settings, None)
    steady, _ = pi_arm(scenario, settings, mean_lead)
    cells, arms = [], []
    busy_at: dict[int, float] = {}  # the fixed concurrencies run on this host
    for name, report in (("pi", pi), ("steady", steady)):
        less, busy = held_to(scenario, settings, report, busy_at)
        missed = busy >= report.gpu_busy_ratio
        arms.append((report.gpu_busy_ratio, report.mean_inflight_partitions, missed))
        miss = f" (missed: fixed@{less} {busy:.4f})" if missed else ""
        cells.append(f"{name} {report.gpu_busy_ratio:.4f} busy, "
                     f"{report.mean_inflight_partitions:.1f} in flight{miss}")  # fmt: skip
    return f"{scenario.name}: lead {mean_lead:.2f} s; " + "; ".join(cells), arms


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    draw_arguments(parser, draws=10, seed=2, classes=("heavy-tail", "bimodal", "outage"))
    args = parser.parse_args(argv)
    scenarios = drawn_hosts(parser, args)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(host_line, scenarios))
    for line, _ in results:
        print(line)
    for index, name in enumerate(("pi", "steady")):
        arms = [arms[index] for _, arms in results]
        print(f"{name}: mean busy {np.mean([a[0] for a in arms]):.4f}, mean in flight "
              f"{np.mean([a[1] for a in arms]):.1f}, '<= 1.05 x fixed as busy' missed on "
              f"{sum(a[2] for a in arms)} of {len(arms)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
