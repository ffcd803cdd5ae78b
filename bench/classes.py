"""The suite's targets on hosts drawn at random, one disturbance class each.

    .venv/bin/python -m bench.classes [--draws 4] [--seed 1] [--jobs 2] [--pi] [--hangs 0]
                                      [--classes slowdown,heavy-tail,bimodal,hung,outage]

The shipped scenarios and `bench.variants` vary the disturbances on a few host shapes; this
draws the host as well. Each draw picks GPU workers (1, 2, 4 or 8), a GPU service time
(lognormal, median 0.1 to 4 s, σ 0.1), a synthesis time 3 to 20 times as long, threads per
synthesis (1, 2 or 4) and cores so that the synthesis slots outpace the GPUs 1.3 to 4 times,
partitions of 1 to 16 GiB and a budget of 2 to 5 × (Little's-law depth + 8). A run lasts 80
mean synthesis times at least. Then one disturbance of its class:

- ``slowdown``: synthesis 2 to 5 times slower from a third of the run on, work in progress
  too, the GPUs still the bottleneck (the slots outpace them 1.2 times at least after it);
- ``heavy-tail``: synthesis times of lognormal σ 0.8 to 1.3;
- ``bimodal``: partitions of 1× or 2× to 8× the work (synthesis and GPU), drawn 1:1 to 9:1;
- ``hung``: 1 to 5 syntheses that hang from a fifth of the run to its end;
- ``outage``: 1 to all GPU workers lost for 5 to 25 % of the run, from a third of it.

With ``--hangs N``, N more syntheses hang on every host, from a fifth of its run, and its
budget holds N more: the classes' disturbances with hangs beside them.

Each scenario runs as the suite runs one (`pacer.sim.suite.run_scenario`: every policy, fixed
concurrencies beside pi) and `check_targets` judges pi. Prints each draw's host, each target
that failed, and the counts per class; with ``--pi``, pi alone, one line a host, to compare
two trees (run in each tree's checkout). The same ``--seed`` draws the same hosts, whichever
classes are asked for.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from bench.variants import report
from pacer.cli.args import count
from pacer.config import Settings
from pacer.sim.distributions import Choice
from pacer.sim.scenario import Scenario
from pacer.sim.suite import run_policy

CLASSES = ("slowdown", "heavy-tail", "bimodal", "hung", "outage")
GIB = 1 << 30


def draw(kind: str, rng: np.random.Generator, index: int, hangs: int = 0) -> Scenario:
    """One host of class ``kind`` drawn from ``rng``; named ``kind-index``. ``hangs`` more
    syntheses hang from a fifth of the run on, a second apart (after the class's own), and
    the budget holds them: the same host as without them, whatever its class."""
    workers = int(rng.choice([1, 2, 4, 8]))
    gpu = float(np.exp(rng.uniform(math.log(0.1), math.log(4.0))))
    synthesis = gpu * float(np.exp(rng.uniform(math.log(3.0), math.log(20.0))))
    threads = int(rng.choice([1, 2, 4]))
    headroom = float(rng.uniform(1.3, 4.0))
    sigma, phases, stalls, outages, work, scale = 0.2, [], [], [], None, 1.0
    heavy = weight = 1
    if kind == "slowdown":
        scale = float(rng.uniform(2.0, 5.0))
        headroom = max(headroom, 1.2 * scale)
    elif kind == "heavy-tail":
        sigma = float(rng.uniform(0.8, 1.3))
    mean = synthesis * math.exp(sigma**2 / 2)  # the lognormal's mean
    duration = max(300.0, 3000 * gpu / workers, 80 * mean * scale)
    if kind == "slowdown":
        phases = [{"at_s": round(duration / 3), "scale": round(scale, 2)}]
    elif kind == "bimodal":
        heavy, weight = int(rng.integers(2, 9)), int(rng.integers(1, 10))
        work = {"dist": "choice", "values": [1.0, float(heavy)], "weights": [float(weight), 1.0]}
    elif kind == "hung":
        stalls = [{"at_s": round(duration / 5) + i} for i in range(int(rng.integers(1, 6)))]
    elif kind == "outage":
        lost = int(rng.integers(1, workers + 1))
        away = round(float(rng.uniform(0.05, 0.25)) * duration)
        outages = [{"at_s": round(duration / 3), "duration_s": away, "workers": list(range(lost))}]
    mean_work = 1.0 if work is None else (weight + heavy) / (weight + 1)
    rate = workers / gpu  # partitions a second the GPUs take (of unit work)
    slots = max(1, math.ceil(headroom * rate * mean))
    little = rate * (mean * scale + gpu)  # in flight to keep the GPUs busy (work cancels out)
    size = int(rng.choice([1, 2, 4, 8, 16]))
    start = round(duration / 5) + len(stalls)  # after the class's own, a second apart
    stalls += [{"at_s": start + i} for i in range(hangs)]
    budget = math.ceil(float(rng.uniform(2.0, 5.0)) * (little + 8)) + len(stalls)
    jobs = math.ceil(1.5 * duration * rate / mean_work / 10)
    raw = {
        "name": f"{kind}-{index}",
        "description": f"a drawn host, {kind}",
        "duration_s": round(duration),
        "seed": int(rng.integers(1, 1_000_000)),
        "gpu": {"workers": workers, "outages": outages,
                "service_s": {"dist": "lognormal", "median": gpu, "sigma": 0.1}},
        "synthesis": {"duration_s": {"dist": "lognormal", "median": synthesis, "sigma": sigma},
                      "threads_per_synthesis": threads, "cores": slots * threads,
                      "phases": phases, "hangs": stalls},
        "partition": {"bytes": size * GIB},
        "memory": {"budget_bytes": budget * size * GIB},
        "jobs": {"partitions_per_job": 10, "arrival": {"kind": "backlog", "jobs": jobs}},
    }  # fmt: skip
    if work is not None:
        raw["jobs"]["partition_work"] = work  # type: ignore[index]
    return Scenario.model_validate(raw)


def drawn(kind: str, index: int, seed: int, hangs: int = 0) -> Scenario:
    """Host ``index`` of class ``kind`` that ``--seed seed`` draws, with ``hangs`` more hung
    syntheses: each host from its own stream, so the same seed draws the same host whichever
    classes and how many draws are asked for."""
    return draw(kind, np.random.default_rng([seed, CLASSES.index(kind), index]), index, hangs)


def describe(sc: Scenario) -> str:
    """One line: the drawn host's shape and its disturbance."""
    syn = sc.synthesis
    slots = sc.synthesis_slots
    rate = sc.gpu.workers / sc.gpu.service_s.mean
    extra = ""
    if syn.phases:
        extra += f", {syn.phases[0].scale:g}x slower at {syn.phases[0].at_s:g} s"
    if sc.gpu.outages:
        o = sc.gpu.outages[0]
        extra += f", {len(o.workers)} GPU(s) lost {o.duration_s:g} s"
    work = sc.jobs.partition_work
    if isinstance(work, Choice):
        extra += f", work {list(work.values)} by {list(work.weights or ())}"
    if syn.hangs:
        extra += f", {len(syn.hangs)} hung"
    return (f"{sc.name}: {sc.gpu.workers} GPU(s) x {sc.gpu.service_s.mean:.2f} s, synthesis "
            f"{syn.duration_s.mean:.2f} s (sigma {getattr(syn.duration_s, 'sigma', 0):.2f}) on "
            f"{slots} slots ({slots / (rate * syn.duration_s.mean):.2f}x), budget "
            f"{sc.memory_slots}{extra}")  # fmt: skip


def pi_line(scenario: Scenario) -> str:
    """pi alone on ``scenario``: its busy ratio, mean and most in flight, and each recovery
    in lead times of the new regime ("never" where none came)."""
    r = run_policy(scenario, "pi", Settings())[1]
    leads = " ".join("never" if x.after_s is None else f"{x.after_s / x.lead_s:.2f}"
                     for x in r.recoveries)  # fmt: skip
    return (f"{scenario.name} busy={r.gpu_busy_ratio:.4f} mean={r.mean_inflight_partitions:.1f}"
            f" peak={r.peak_inflight_partitions} recovery={leads or '-'}")  # fmt: skip


def draw_arguments(
    parser: argparse.ArgumentParser, *, draws: int, seed: int, classes: Sequence[str]
) -> None:
    """Add ``--draws``, ``--seed``, ``--jobs`` and ``--classes`` to ``parser``, with these
    defaults (``--jobs`` 2): the hosts a tool draws, as this one draws them."""
    parser.add_argument("--draws", type=int, default=draws, help="hosts of each class")
    parser.add_argument("--seed", type=int, default=seed, help="the draws' random seed")
    parser.add_argument("--jobs", type=int, default=2, help="processes")
    parser.add_argument("--classes", default=",".join(classes), help="classes to draw")


def drawn_hosts(
    parser: argparse.ArgumentParser, args: argparse.Namespace, hangs: int = 0
) -> list[Scenario]:
    """The hosts ``args`` ask for (``draw_arguments``), class by class, each with ``hangs``
    more hung syntheses; exits through ``parser.error`` naming ``--classes`` where a class is
    unknown or none is named."""
    kinds = [k for k in args.classes.split(",") if k]
    unknown = sorted(set(kinds) - set(CLASSES))
    if unknown or not kinds:
        parser.error(f"--classes: unknown {', '.join(unknown) or '(none named)'}; one or more "
                     f"of {', '.join(CLASSES)}")  # fmt: skip
    return [drawn(kind, i, args.seed, hangs) for kind in kinds for i in range(args.draws)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    draw_arguments(parser, draws=4, seed=1, classes=CLASSES)
    hangs_help = "syntheses that hang on every host, from a fifth of its run (as well)"
    parser.add_argument("--hangs", type=count(0), default=0, help=hangs_help)
    pi_help = "pi alone, one line a host (busy, mean and most in flight, recoveries in leads)"
    parser.add_argument("--pi", action="store_true", help=pi_help)
    args = parser.parse_args(argv)
    scenarios = drawn_hosts(parser, args, args.hangs)
    for sc in scenarios:
        print(describe(sc), flush=True)
    settings = Settings()
    if args.pi:
        with ProcessPoolExecutor(args.jobs) as pool:
            for line in pool.map(pi_line, scenarios):
                print(line, flush=True)
        return 0
    report(scenarios, settings, args.jobs, group=lambda name: name.rsplit("-", 1)[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
