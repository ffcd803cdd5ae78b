"""What synthesis can supply, as pi reads it, against the rate cap on dispatch and the truth.

    .venv/bin/python -m bench.supply [--sigmas 1,1.3] [--headroom 0.8,1.05,1.4] [--jobs 2]
        [--markdown]

`bench.near_balance`'s hosts (`heavy-tail`'s two GPU workers at 12.5 partitions a second,
lognormal synthesis of each σ on the cores for each headroom), each with its syntheses sharing
the cores and in as many processes as cores with a queue in front. pi runs each at the
scenario's seed; from 100 s on, the median over its decisions of what it reads as the synthesis
supply (`PIController.synthesis_supply_per_s`) and of its rate cap on dispatch
(`Terms.rate_cap_per_s`), against the true supply: cores ÷ the mean synthesis time.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

from bench.near_balance import floats, host
from bench.usage import doc_parser
from bench.watch import watched_pi
from pacer.cli.table import render
from pacer.config import Settings
from pacer.control.controller import PIController
from pacer.sim.engine import Simulation

AFTER_S = 100.0  # the start and its bootstrap left out


def read(job: tuple[float, float, bool]) -> list[object]:
    """One host's row: name, true supply, supply read, rate cap (partitions/s)."""
    sigma, headroom, executor = job
    scenario = host(sigma, headroom, 0, executor)
    supplies: list[float] = []
    caps: list[float] = []

    def read_after(now: float, policy: PIController) -> None:
        if now >= AFTER_S:
            supplies.append(policy.synthesis_supply_per_s)
            caps.append(policy.terms.rate_cap_per_s)

    Simulation(scenario, "pi", watched_pi(scenario, Settings(), read_after)).run()
    true = scenario.synthesis.cores / scenario.synthesis.duration_s.mean
    supply, cap = statistics.median(supplies), statistics.median(caps)
    return [scenario.name, f"{true:.2f}", f"{supply:.2f}", f"{cap:.2f}",
            f"{supply / true - 1:+.1%}", f"{cap / true - 1:+.1%}"]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = doc_parser(__doc__)
    parser.add_argument("--sigmas", type=floats, default=[1.0, 1.3], help="lognormal σ list")
    parser.add_argument("--headroom", type=floats, default=[0.8, 1.05, 1.4],
                        help="slots' throughput over the GPUs' (list)")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = parser.parse_args(argv)
    jobs = [(s, h, e) for s in args.sigmas for h in args.headroom for e in (False, True)]
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(read, jobs))
    headers = ["host", "true supply /s", "supply read /s", "rate cap /s", "supply read − true",
               "rate cap − true"]  # fmt: skip
    print(render(headers, rows, markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
