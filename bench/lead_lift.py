"""What lifts pi's lead time above T̂syn on hosts drawn at random: the live floor or a slowdown.

    .venv/bin/python -m bench.lead_lift [--draws 10] [--seed 2] [--jobs 2] [--markdown]
                                        [--classes heavy-tail,bimodal]

pi's projection looks one lead time ahead: T̂syn, lifted by the live floor while the oldest
syntheses running outrun it, and by a slowdown the survival check calls (docs/controller.md,
"Live floor on the lead time" and "Syntheses that do not finish"). Each lift sends more
partitions ahead, so on a host that does not change it is memory held for nothing. For each
host drawn as `bench.classes` draws it, pi runs once and is watched at every decision after
its first ten mean syntheses: the share of that time its lead time stood above T̂syn, and the
mean lift in T̂syn (time-weighted, so 0.05 is a lead time 5 % long on average), each split by
what set it: the live floor, or the survival check's slowdown. Then the means per class. A
diagnostic of the controller's estimates: it changes nothing in the run.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from bench.classes import CLASSES, draw_arguments, drawn_hosts
from bench.watch import watched_pi
from pacer.cli.table import render
from pacer.config import Settings
from pacer.control.controller import PIController
from pacer.control.estimates import Estimator
from pacer.sim.engine import Simulation
from pacer.sim.report import summarize
from pacer.sim.scenario import Scenario

WARM_SYNTHESES = 10  # decisions are watched once this many mean syntheses are past


@dataclass(frozen=True)
class Lifts:
    """What lifted pi's lead time on one host, after the warm-up: shares of the time, and
    mean lifts over all of it in T̂syn (the floor's and the check's add up to ``lift``)."""

    host: str
    share: float  # of the time the lead time stood above T̂syn
    lift: float  # (lead − T̂syn) ÷ T̂syn, time-weighted
    floor_share: float  # ... where the live floor set it
    floor_lift: float
    check_share: float  # ... where the survival check's slowdown set it
    check_lift: float
    busy: float  # pi's GPU busy ratio over the run
    inflight: float  # pi's mean partitions in flight


def lifts(scenario: Scenario, settings: Settings) -> Lifts:
    """pi on ``scenario``, watched (``Lifts``). Raises ValueError where the run ends before
    its warm-up does."""
    warm_s = WARM_SYNTHESES * scenario.synthesis.duration_s.mean
    # (time, T̂syn, the live floor, the slowdown's lead time, the lead time used), all in s
    seen: list[tuple[float, float, float, float, float]] = []

    def watch(now: float, policy: PIController) -> None:
        estimator: Estimator = policy._est  # the parts of its lead time, read only
        syn = estimator.synthesis_s
        if now >= warm_s and syn:
            seen.append((now, syn, estimator.live_floor_s(), estimator.slowdown_lead_s,
                         policy.terms.lead_s))  # fmt: skip

    report = summarize(Simulation(scenario, "pi", watched_pi(scenario, settings, watch)).run())
    if len(seen) < 2:
        raise ValueError(f"{scenario.name}: the run ends before its first {WARM_SYNTHESES} "
                         "mean syntheses are past")  # fmt: skip
    at, syn, floor, check, lead = (np.array(column) for column in zip(*seen, strict=True))
    weight = np.diff(at, append=at[-1])
    total = float(weight.sum())
    lifted = lead > syn * (1 + 1e-9)
    by_check = lifted & (check > floor)
    by_floor = lifted & ~by_check
    excess = np.where(lifted, (lead - syn) / syn, 0.0)

    def share(mask: np.ndarray) -> float:
        return float(weight[mask].sum()) / total if total > 0 else math.nan

    def lift(mask: np.ndarray) -> float:
        return float((weight * excess)[mask].sum()) / total if total > 0 else math.nan

    return Lifts(scenario.name, share(lifted), lift(lifted), share(by_floor), lift(by_floor),
                 share(by_check), lift(by_check), report.gpu_busy_ratio,
                 report.mean_inflight_partitions)  # fmt: skip


def _host(scenario: Scenario) -> Lifts:
    return lifts(scenario, Settings())


HEADERS = ("host", "lifted, share", "mean lift (T̂syn)", "floor: share", "floor: lift",
           "slowdown: share", "slowdown: lift", "busy", "in flight")  # fmt: skip


def row(x: Lifts) -> tuple[str, ...]:
    """``x`` as a row of ``HEADERS``."""
    return (x.host, f"{x.share:.3f}", f"{x.lift:.3f}", f"{x.floor_share:.3f}",
            f"{x.floor_lift:.3f}", f"{x.check_share:.3f}", f"{x.check_lift:.3f}",
            f"{x.busy:.4f}", f"{x.inflight:.1f}")  # fmt: skip


def mean(name: str, hosts: Sequence[Lifts]) -> Lifts:
    """The means of ``hosts``, named ``name``."""
    fields = ("share", "lift", "floor_share", "floor_lift", "check_share", "check_lift", "busy",
              "inflight")  # fmt: skip
    values = {f: float(np.mean([getattr(h, f) for h in hosts])) for f in fields}
    return Lifts(name, **values)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    draw_arguments(parser, draws=10, seed=2, classes=("heavy-tail", "bimodal"))
    parser.add_argument("--markdown", action="store_true", help="tables in Markdown")
    args = parser.parse_args(argv)
    scenarios = drawn_hosts(parser, args)
    kinds = sorted({sc.name.rsplit("-", 1)[0] for sc in scenarios}, key=CLASSES.index)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        hosts = list(pool.map(_host, scenarios))
    print(render(HEADERS, [row(h) for h in hosts], markdown=args.markdown))
    print()
    means = [mean(f"{kind} ({args.draws} hosts)", [h for h, sc in zip(hosts, scenarios,
             strict=True) if sc.name.startswith(f"{kind}-")]) for kind in kinds]  # fmt: skip
    print(render(HEADERS, [row(m) for m in means], markdown=args.markdown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
