"""A slow hand-off in front of the synthesis processes, in the simulator: pi as it is, pi that
does not hear how a synthesis's time divides (as before D200), and unpaced.

    .venv/bin/python -m bench.handoff [--seeds 5] [--handoffs 0,0.1,0.3,0.6]
                                      [--processes 8] [--seconds 240] [--markdown]

The host: ``--processes`` synthesis processes on as many cores at about 1.0 s a synthesis
(lognormal σ 0.05), feeding two GPU workers that prove 12.5 partitions a second, so synthesis
bounds at ``processes`` a second (below 12.5); 64 GiB of 3 GiB partitions. Each dispatch
reaches the processes ``handoff_s`` after it is made: the trip through a busy service. For each
hand-off and seed (41 + k), each policy runs ``--seconds``; the table gives, per hand-off and
policy, the means over the seeds of the GPUs' busy share and the partitions in flight from 60 s
on (after the cold start), and the busy share less unpaced's (lowest and highest over the
seeds).
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict

from bench.usage import doc_parser
from pacer.cli.table import render
from pacer.config import Settings
from pacer.control.controller import PIController
from pacer.control.policy import Caps, SynthesisParts
from pacer.sim.engine import PolicyFactory, RawRun, Simulation
from pacer.sim.policies import policy_factory
from pacer.sim.scenario import Scenario, load_scenario, scenario_path

POLICIES = ("pi", "pi before D200", "unpaced")
WARM_S = 60.0  # measured from here on


class UnmeasuredPI(PIController):
    """pi that does not hear how a synthesis's time divides: its rate cap and its queue in
    front of the processes from T̂syn alone, as before D200."""

    def observe_synthesis(self, seconds: float, parts: SynthesisParts | None = None) -> None:
        super().observe_synthesis(seconds)


def slow_handoff_host(handoff_s: float, seed: int, processes: int = 8,
                      seconds: float = 180.0) -> Scenario:  # fmt: skip
    """``processes`` synthesis processes on as many cores at about 1.0 s a synthesis, feeding
    GPUs that prove 12.5 a second; each dispatch reaches the processes ``handoff_s`` after it
    is made. Runs ``seconds``."""
    sc = load_scenario(scenario_path("synthesis-processes"))
    assert sc.synthesis.executor is not None
    synthesis = sc.synthesis.model_copy(update={
        "cores": processes,
        "executor": sc.synthesis.executor.model_copy(
            update={"processes": processes, "handoff_s": handoff_s}
        ),
        "duration_s": sc.synthesis.duration_s.model_copy(update={"median": 1.0, "sigma": 0.05}),
    })  # fmt: skip
    return sc.model_copy(update={"duration_s": seconds, "seed": seed, "synthesis": synthesis})


def factory(name: str, sc: Scenario, settings: Settings) -> PolicyFactory:
    if name != "pi before D200":
        return policy_factory(name, sc, settings)
    caps = Caps.from_host(
        cores=sc.synthesis.cores, threads_per_synthesis=1, max_concurrent=None,
        budget_bytes=sc.memory.budget_bytes, partition_bytes=sc.partition.bytes,
        synthesis_queue=True,
    )  # fmt: skip
    return lambda clock: UnmeasuredPI(settings.controller, caps, clock)


def time_average(run: RawRun, counts: list[int], after_s: float) -> float:
    """``counts``, traced after each event of ``run``, time-averaged from ``after_s`` on."""
    t = run.trace.t
    steps = [(t[i + 1] - t[i], counts[i]) for i in range(len(t) - 1) if t[i] >= after_s]
    return sum(dt * k for dt, k in steps) / sum(dt for dt, _ in steps)


def main() -> int:
    parser = doc_parser(__doc__)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--handoffs", default="0,0.1,0.3,0.6", help="hand-off times (s)")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=240.0, help="simulated, per run")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    settings = Settings()
    rows = []
    for handoff in (float(h) for h in args.handoffs.split(",")):
        runs: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for k in range(args.seeds):
            sc = slow_handoff_host(handoff, 41 + k, args.processes, args.seconds)
            for name in POLICIES:
                run = Simulation(sc, name, factory(name, sc, settings)).run()
                workers = sc.gpu.workers
                busy = time_average(run, run.trace.busy, WARM_S) / workers
                runs[name].append((busy, time_average(run, run.trace.inflight, WARM_S)))
            print(f"hand-off {handoff} s, seed {k + 1}/{args.seeds}", file=sys.stderr)
        unpaced = [b for b, _ in runs["unpaced"]]
        for name in POLICIES:
            less = [b - u for (b, _), u in zip(runs[name], unpaced, strict=True)]
            rows.append((
                f"{handoff:g}", name, f"{statistics.fmean(b for b, _ in runs[name]):.4f}",
                f"{min(less):+.4f} to {max(less):+.4f}",
                f"{statistics.fmean(m for _, m in runs[name]):.1f}",
            ))  # fmt: skip
    headers = ("hand-off s", "policy", "GPU busy", "busy − unpaced's (seeds)", "mean in flight")
    print(f"{args.processes} processes at 1.0 s, GPUs at 12.5/s, {args.seeds} seeds, "
          f"{args.seconds:g} s each, measured from {WARM_S:g} s")  # fmt: skip
    print(render(headers, rows, markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
