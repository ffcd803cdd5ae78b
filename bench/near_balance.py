"""pi where the synthesis slots barely outpace the GPUs, with and without its near-balance buffer.

    .venv/bin/python -m bench.near_balance [--seeds 3] [--jobs 2] [--sigmas 1,1.3]
        [--headroom 1.05,1.1,1.2,1.4] [--executor] [--markdown]

`heavy-tail`'s host (two GPU workers, 12.5 partitions a second), its synthesis times lognormal
of each σ (median 1.4 s), on the cores that let the synthesis slots outpace the GPUs by each
headroom: cores = round(headroom × λ × mean synthesis time). Seeds: the scenario's + 101·k.
With ``--executor`` the host runs its syntheses in as many processes as cores, a partition
dispatched beyond them waiting for one (as the service's executor does); without, every
synthesis dispatched starts at once and they share the cores.
Each host runs pi without the buffer (``NEAR_BALANCE_IDLE`` 0), pi as set (the environment's
``PACER_CONTROLLER__*`` apply) and unpaced. A row per host and seed: busy ratio and mean in
flight of each; then a summary line: how many of pi's runs come within 0.005 of unpaced's busy
ratio, with the buffer and without, and the worst gap of each.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

from bench.usage import doc_parser
from bench.variants import _changed
from pacer.cli.table import render
from pacer.config import Settings
from pacer.sim.scenario import Executor, Scenario, load_scenario, scenario_path
from pacer.sim.suite import BUSY_VS_BEST_BASELINE, run_policy

ARMS = ("pi, no buffer", "pi", "unpaced")


def host(sigma: float, headroom: float, k: int, executor: bool = False) -> Scenario:
    """`heavy-tail` with synthesis of lognormal ``sigma``, cores for ``headroom``, seed k;
    with ``executor``, in as many synthesis processes as cores."""
    base = load_scenario(scenario_path("heavy-tail"))
    duration = base.synthesis.duration_s.model_copy(update={"sigma": sigma})
    rate = base.gpu.workers / base.gpu.service_s.mean
    cores = round(headroom * rate * duration.mean)
    name = f"sigma {sigma:g}, {headroom:g}x, {cores} {'processes' if executor else 'cores'}"
    processes = Executor(processes=cores) if executor else None
    changed = _changed(base, name, "synthesis", cores=cores, duration_s=duration,
                       executor=processes)  # fmt: skip
    return changed.model_copy(update={"seed": base.seed + 101 * k})


def run(job: tuple[Scenario, str]) -> tuple[float, float]:
    """(busy ratio, mean in flight) of one arm on one host."""
    scenario, arm = job
    settings = Settings()
    if arm == "pi, no buffer":
        off = settings.controller.model_copy(update={"near_balance_idle": 0.0})
        settings = settings.model_copy(update={"controller": off})
    _, report = run_policy(scenario, "unpaced" if arm == "unpaced" else "pi", settings)
    return report.gpu_busy_ratio, report.mean_inflight_partitions


def floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",")]


def main(argv: Sequence[str] | None = None) -> int:
    parser = doc_parser(__doc__)
    parser.add_argument("--seeds", type=int, default=3, help="seeds of each host (default 3)")
    parser.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--sigmas", type=floats, default=[1.0, 1.3], help="lognormal σ list")
    parser.add_argument("--headroom", type=floats, default=[1.05, 1.1, 1.2, 1.4],
                        help="slots' throughput over the GPUs' (list)")  # fmt: skip
    executor_help = "synthesis in as many processes as cores, a queue in front"
    parser.add_argument("--executor", action="store_true", help=executor_help)
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = parser.parse_args(argv)
    hosts = [host(s, h, k, args.executor)
             for s in args.sigmas for h in args.headroom for k in range(args.seeds)]  # fmt: skip
    jobs = [(sc, arm) for sc in hosts for arm in ARMS]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(run, jobs))
    rows: list[list[object]] = []
    gaps: dict[str, list[float]] = {arm: [] for arm in ARMS[:2]}
    for i, sc in enumerate(hosts):
        (off, off_mem), (pi, pi_mem), (unpaced, unpaced_mem) = results[3 * i : 3 * i + 3]
        gaps[ARMS[0]].append(unpaced - off)
        gaps[ARMS[1]].append(unpaced - pi)
        rows.append([sc.name, sc.seed, f"{off:.4f}", f"{pi:.4f}", f"{unpaced:.4f}",
                     f"{off_mem:.1f}", f"{pi_mem:.1f}", f"{unpaced_mem:.1f}"])  # fmt: skip
        print(f"{sc.name}, seed {sc.seed}: done", file=sys.stderr, flush=True)
    headers = ["host", "seed", "busy, no buffer", "busy, pi", "busy, unpaced",
               "in flight, no buffer", "in flight, pi", "in flight, unpaced"]  # fmt: skip
    print(render(headers, rows, markdown=args.markdown))
    for arm, gap in gaps.items():
        within = sum(g <= BUSY_VS_BEST_BASELINE for g in gap)
        print(f"{arm}: within {BUSY_VS_BEST_BASELINE} of unpaced's busy on {within} of "
              f"{len(gap)} runs; worst {max(gap):.4f} behind")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
