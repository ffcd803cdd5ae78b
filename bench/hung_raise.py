"""How much hung syntheses raise pi's memory in flight on drawn hosts, over several seeds.

    .venv/bin/python -m bench.hung_raise HOST [HOST ...] [--seed 2] [--hangs 4] [--runs 6]

The suite's target "hung syntheses raise mean in flight by at most their number" compares one
run with hangs against one without. Each run's mean in flight wanders with its random draws,
and the two runs part ways at the first hang, so one pair can miss by chance on a host whose
raise lies below the bar. This runs each host (``HOST``: a name `bench.classes --seed`
prints, such as ``heavy-tail-9``) with and without ``--hangs`` more hung syntheses, on
``--runs`` scenario seeds (the suite's sweep: seed + 101·k), and prints each pair's raise and
their mean with its 95 % interval: a mean above the number hung, outside its interval, is a
real miss; a single pair above it with the mean below is the runs' wander.
"""

from __future__ import annotations

import sys

import numpy as np

from bench.classes import CLASSES, drawn
from bench.stats import interval
from bench.usage import doc_parser
from pacer.cli.args import count
from pacer.cli.table import render
from pacer.config import Settings
from pacer.sim.scenario import Scenario
from pacer.sim.suite import run_policy


def host(name: str, seed: int, hangs: int) -> Scenario:
    """The host ``name`` (``class-index``) of `bench.classes` ``--seed seed``, with ``hangs``
    more hung syntheses. Raises ValueError for a name no class draws.

    >>> host("hung-3", 7, 0).name, len(host("hung-3", 7, 2).synthesis.hangs) - len(
    ...     host("hung-3", 7, 0).synthesis.hangs)
    ('hung-3', 2)
    """
    kind, _, index = name.rpartition("-")
    if kind not in CLASSES or not index.isdigit():
        raise ValueError(f"HOST: {name!r} is no drawn host; one of {', '.join(CLASSES)}, '-N'")
    return drawn(kind, int(index), seed, hangs)


def raises(name: str, seed: int, hangs: int, runs: int) -> list[tuple[float, float]]:
    """Per run k, pi's mean in flight (partitions) without and with the hangs."""
    plain, hung = host(name, seed, 0), host(name, seed, hangs)
    settings = Settings()
    out = []
    for k in range(runs):
        pair = [run_policy(sc.model_copy(update={"seed": sc.seed + 101 * k}), "pi", settings)[1]
                for sc in (plain, hung)]  # fmt: skip
        out.append((pair[0].mean_inflight_partitions, pair[1].mean_inflight_partitions))
        print(f"{name} run {k + 1} of {runs}", file=sys.stderr, flush=True)
    return out


def main() -> int:
    parser = doc_parser(__doc__)
    parser.add_argument("hosts", nargs="+", metavar="HOST", help="drawn hosts, e.g. heavy-tail-9")
    parser.add_argument("--seed", type=int, default=2, help="bench.classes' --seed")
    parser.add_argument("--hangs", type=count(1), default=4, help="syntheses that hang more")
    parser.add_argument("--runs", type=count(2), default=6, help="scenario seeds per host")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    try:
        for name in args.hosts:
            host(name, args.seed, 0)
    except ValueError as exc:
        parser.error(str(exc))
    rows = []
    for name in args.hosts:
        pairs = raises(name, args.seed, args.hangs, args.runs)
        diffs = [b - a for a, b in pairs]
        mean, half = interval(diffs)
        verdict = "over" if mean - half > args.hangs else "within" if mean <= args.hangs else "tie"
        rows.append((name, f"{np.mean([a for a, _ in pairs]):.1f}",
                     " ".join(f"{d:+.1f}" for d in diffs), f"{mean:+.2f} ± {half:.2f}",
                     f"{verdict} ({args.hangs} hung)"))  # fmt: skip
    print(f"bench.classes --seed {args.seed}, {args.hangs} more hung, {args.runs} runs a host")
    headers = ("host", "mean in flight unhung", "raise by run", "mean raise", "against the bar")
    print(render(headers, rows, markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
