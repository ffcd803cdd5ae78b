"""The suite's targets on variants of the shipped disturbances that the suite does not hold.

    .venv/bin/python -m bench.variants [--seeds 2] [--jobs 2] [--shipped] [--executor]
                                       [--target-ready N]

Each variant changes one shipped scenario's disturbance: the GPU-bound synthesis slowdown 3× and
8× (`synthesis-slowdown-gpu-bound`, shipped at 5×), synthesis times of lognormal σ 1.3, and σ 1.6
on 128 cores (`heavy-tail`, σ 1 on 64), `heavy-tail` on 32 cores (its slots outpace the GPUs
only 1.1 times), partitions of 1× or 8× the work drawn 9 to 1 (`bimodal-partitions`, 1× or
4× 3 to 1), six hung syntheses and none (`hung-syntheses`, three), and every GPU lost for
300 s or one for 60 s (`gpu-outage`, one for 600 s). Each runs as the suite runs a scenario
(`pacer.sim.suite.run_scenario`: every policy, fixed concurrencies beside pi) on ``--seeds``
seeds (seed + 101·k), and `check_targets` judges pi. The variants keep their scenario's own
targets, some of which a variant changes on purpose (more hung syntheses hold more).
``--shipped`` adds every shipped scenario at its own seed; ``--executor`` runs every scenario's
syntheses in processes, cores ÷ threads a synthesis of them, with partitions dispatched beyond
them waiting for one (as the service's executor does; a scenario with its own executor keeps
it); ``--target-ready`` sets pi's ready buffer (``PACER_CONTROLLER__TARGET_READY``). Prints
each target that failed, then per scenario the targets checked and failed.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

from bench.gains import _scenarios
from pacer.config import ControllerSettings, Settings
from pacer.sim.disturbances import Hang, Outage, Phase
from pacer.sim.scenario import Executor, Scenario, load_scenario, shipped_scenarios
from pacer.sim.suite import check_targets, run_scenario


def _changed(scenario: Scenario, name: str, part: str, **changes: object) -> Scenario:
    """``scenario`` named ``name`` with ``changes`` to its ``part`` (gpu, synthesis, jobs)."""
    updated = getattr(scenario, part).model_copy(update=changes)
    return scenario.model_copy(update={"name": name, part: updated})


def variants(seeds: int) -> list[Scenario]:
    """The variants, each on ``seeds`` seeds (`bench.gains`' seeds: seed + 101·k)."""
    out = []
    for slow in _scenarios(["synthesis-slowdown-gpu-bound"], seeds):
        for scale in (3.0, 8.0):
            phases = (Phase(at_s=200, scale=scale),)
            out.append(_changed(slow, f"slowdown {scale:g}x", "synthesis", phases=phases))
    for tail in _scenarios(["heavy-tail"], seeds):
        wider = tail.synthesis.duration_s.model_copy(update={"sigma": 1.3})
        out.append(_changed(tail, "lognormal sigma 1.3", "synthesis", duration_s=wider))
        widest = tail.synthesis.duration_s.model_copy(update={"sigma": 1.6})
        out.append(_changed(tail, "lognormal sigma 1.6, 128 cores", "synthesis",
                            duration_s=widest, cores=128))  # fmt: skip
        out.append(_changed(tail, "heavy tail, 32 cores", "synthesis", cores=32))
    for bimodal in _scenarios(["bimodal-partitions"], seeds):
        work = bimodal.jobs.partition_work
        assert work is not None
        wider = work.model_copy(update={"values": (1.0, 8.0), "weights": (9.0, 1.0)})
        out.append(_changed(bimodal, "bimodal 1x/8x 9:1", "jobs", partition_work=wider))
    for hung in _scenarios(["hung-syntheses"], seeds):
        six = tuple(Hang(at_s=60 + i) for i in range(6))
        out.append(_changed(hung, "6 hung", "synthesis", hangs=six))
        out.append(_changed(hung, "none hung", "synthesis", hangs=()))
    for outage in _scenarios(["gpu-outage"], seeds):
        every = Outage(at_s=900, duration_s=300, workers=(0, 1, 2, 3))
        out.append(_changed(outage, "every GPU lost 300 s", "gpu", outages=(every,)))
        one = Outage(at_s=900, duration_s=60, workers=(2, 3))
        out.append(_changed(outage, "one GPU lost 60 s", "gpu", outages=(one,)))
    return out


def in_processes(scenario: Scenario) -> Scenario:
    """``scenario`` with its syntheses in processes (cores ÷ threads a synthesis of them) and a
    queue in front, named so; unchanged where it has an executor already."""
    syn = scenario.synthesis
    if syn.executor is not None:
        return scenario
    processes = Executor(processes=max(1, syn.cores // syn.threads_per_synthesis))
    return _changed(scenario, f"{scenario.name}, processes", "synthesis", executor=processes)


def judged(job: tuple[Scenario, Settings]) -> list[tuple[str, int, str, bool, str]]:
    """(variant, seed, target, passed, detail) for each target of pi on the job's scenario,
    under its settings."""
    scenario, settings = job
    reports = run_scenario(scenario, settings)
    return [(f.scenario, scenario.seed, f.target, f.passed, f.detail)
            for f in check_targets(reports, settings)]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=2, help="seeds of each variant")
    parser.add_argument("--jobs", type=int, default=2, help="processes")
    parser.add_argument("--shipped", action="store_true",
                        help="also every shipped scenario, at its own seed")  # fmt: skip
    executor_help = "syntheses in processes with a queue in front"
    parser.add_argument("--executor", action="store_true", help=executor_help)
    parser.add_argument(
        "--target-ready",
        type=int,
        default=None,
        help="PACER_CONTROLLER__TARGET_READY for pi (default: the default)",
    )
    args = parser.parse_args(argv)
    controller = {} if args.target_ready is None else {"target_ready": args.target_ready}
    settings = Settings(controller=ControllerSettings(**controller))
    scenarios = [load_scenario(path) for path in shipped_scenarios()] if args.shipped else []
    scenarios += variants(args.seeds)
    if args.executor:
        scenarios = [in_processes(sc) for sc in scenarios]
    report(scenarios, settings, args.jobs)
    return 0


def report(scenarios: Sequence[Scenario], settings: Settings, jobs: int,
           group: Callable[[str], str] = str) -> None:  # fmt: skip
    """Judge pi on each of ``scenarios`` under ``settings`` (`judged`, in ``jobs`` processes);
    print each target that failed, then the targets checked and failed per ``group`` of the
    scenarios' names."""
    totals: dict[str, list[int]] = {}
    with ProcessPoolExecutor(jobs) as pool:
        for findings in pool.map(judged, [(sc, settings) for sc in scenarios]):
            for name, seed, target, passed, detail in findings:
                counts = totals.setdefault(group(name), [0, 0])
                counts[0] += 1
                counts[1] += not passed
                if not passed:
                    print(f"FAILED {name} (seed {seed}): {target}: {detail}", flush=True)
    for name, (checked, failed) in totals.items():
        print(f"{name}: {checked} targets checked, {failed} failed")


if __name__ == "__main__":
    raise SystemExit(main())
