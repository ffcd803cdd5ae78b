"""The queue in front of the synthesis processes, in the simulator: the hand-off's gap and its
closing.

    .venv/bin/python -m bench.synthesis_queue [--seeds 10] [--handoffs 0,0.02,0.05,0.1]
                                              [--scenario synthesis-processes] [--markdown]

On the scenario (by default the shipped ``synthesis-processes``: 16 processes feeding one
H200, synthesis bounds), for each hand-off time and each of ``--seeds`` seeds (the scenario's
seed + 101·k, as the suite's sweep), runs pi, pi without a queue (at most one synthesis a
process), unpaced, cuzk-default and fixed at Little's law + q*. Prints, per hand-off and
policy, the means over the seeds of partitions/s, GPU busy and mean in flight, and each one's
throughput against unpaced's (lowest and highest over the seeds).
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict

from bench.usage import doc_parser
from pacer.cli.table import render
from pacer.config import Settings
from pacer.control.controller import PIController
from pacer.control.policy import Caps
from pacer.sim.engine import PolicyFactory, Simulation
from pacer.sim.policies import policy_factory
from pacer.sim.report import summarize
from pacer.sim.scenario import Scenario, load_scenario, scenario_path

POLICIES = ("pi", "pi without a queue", "unpaced", "cuzk-default", "fixed")


def with_handoff(scenario: Scenario, handoff_s: float, seed: int) -> Scenario:
    executor = scenario.synthesis.executor
    if executor is None:
        raise SystemExit(f"{scenario.name}: the scenario has no synthesis.executor")
    synthesis = scenario.synthesis.model_copy(
        update={"executor": executor.model_copy(update={"handoff_s": handoff_s})}
    )
    return scenario.model_copy(update={"seed": seed, "synthesis": synthesis})


def factory(name: str, scenario: Scenario, settings: Settings) -> PolicyFactory:
    if name != "pi without a queue":
        return policy_factory(name, scenario, settings)
    caps = Caps.from_host(
        cores=scenario.synthesis.cores,
        threads_per_synthesis=scenario.synthesis.threads_per_synthesis,
        max_concurrent=settings.synthesis.max_concurrent,
        budget_bytes=scenario.memory.budget_bytes,
        partition_bytes=scenario.partition.bytes,
        synthesis_queue=True,
    )
    return lambda clock: PIController(settings.controller, caps, clock, queue_sigmas=0.0)


def main() -> int:
    parser = doc_parser(__doc__)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--handoffs", default="0,0.02,0.05,0.1", help="hand-off times (s)")
    parser.add_argument("--scenario", default="synthesis-processes")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    base = load_scenario(scenario_path(args.scenario))
    settings = Settings()
    rows = []
    for handoff in (float(h) for h in args.handoffs.split(",")):
        runs: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
        for k in range(args.seeds):
            scenario = with_handoff(base, handoff, base.seed + 101 * k)
            for name in POLICIES:
                r = summarize(Simulation(scenario, name, factory(name, scenario, settings)).run())
                runs[name].append(
                    (r.throughput_partitions_per_s, r.gpu_busy_ratio, r.mean_inflight_partitions)
                )
            print(f"hand-off {handoff} s, seed {k + 1}/{args.seeds}", file=sys.stderr)
        unpaced = [t for t, _, _ in runs["unpaced"]]
        for name in POLICIES:
            thr = [t for t, _, _ in runs[name]]
            ratio = [t / u for t, u in zip(thr, unpaced, strict=True)]
            rows.append((
                f"{handoff:g}", name, f"{statistics.fmean(thr):.3f}",
                f"{statistics.fmean(b for _, b, _ in runs[name]):.4f}",
                f"{statistics.fmean(m for _, _, m in runs[name]):.1f}",
                f"{min(ratio):.4f} to {max(ratio):.4f}",
            ))  # fmt: skip
    headers = ("hand-off s", "policy", "partitions/s", "GPU busy", "mean in flight",
               "throughput ÷ unpaced's (seeds)")  # fmt: skip
    print(f"{args.scenario}, {args.seeds} seeds: means over the seeds")
    print(render(headers, rows, markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
