"""A synthetic recording for `pacer tune`: an H200-shaped host whose synthesis has a heavy tail.

    .venv/bin/python -m bench.tune_trace [--partitions 3000] [--seed 1] [--out FILE.csv]

Writes a CSV trace (docs/controller.md) with columns synthesis_s, gpu_s and job:
jobs of ``JOB_PARTITIONS`` partitions, all waiting at the start. A partition's GPU seconds are
lognormal (median ``GPU_MEDIAN_S``, sigma ``GPU_SIGMA``: one worker of an H200 at Goldilocks
2^27). Its synthesis seconds are lognormal (median ``SYNTHESIS_MEDIAN_S``, sigma
``SYNTHESIS_SIGMA``: a core each), and one partition in ``1 / STRAGGLER_SHARE`` is a straggler
that takes ``STRAGGLER_TIMES`` as long (a synthesis that page-faults, or meets another process
on its core). Replay it as the host it stands for (``HOST``):

    pacer tune --trace FILE.csv --workers 2 --cores 32 --threads-per-synthesis 1 \\
        --partition-bytes 3GiB --budget 300GiB --goal min-memory --min-busy 0.99
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

JOB_PARTITIONS = 20
GPU_MEDIAN_S, GPU_SIGMA = 0.16, 0.1
SYNTHESIS_MEDIAN_S, SYNTHESIS_SIGMA = 1.4, 0.25
STRAGGLER_SHARE = 0.1
STRAGGLER_TIMES = (4.0, 10.0)  # uniform between these
HOST = "--workers 2 --cores 32 --threads-per-synthesis 1 --partition-bytes 3GiB --budget 300GiB"


def trace(partitions: int, seed: int) -> str:
    """The CSV text of ``partitions`` partitions drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    gpu = GPU_MEDIAN_S * np.exp(rng.normal(0.0, GPU_SIGMA, partitions))
    synthesis = SYNTHESIS_MEDIAN_S * np.exp(rng.normal(0.0, SYNTHESIS_SIGMA, partitions))
    straggler = rng.random(partitions) < STRAGGLER_SHARE
    synthesis *= np.where(straggler, rng.uniform(*STRAGGLER_TIMES, partitions), 1.0)
    lines = ["synthesis_s,gpu_s,job"]
    lines += [
        f"{s:.4f},{g:.4f},{i // JOB_PARTITIONS}"
        for i, (s, g) in enumerate(zip(synthesis, gpu, strict=True))
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=3000, help="partitions (3000)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (1)")
    parser.add_argument("--out", type=Path, help="write here (default: standard output)")
    args = parser.parse_args()
    text = trace(args.partitions, args.seed)
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
        print(f"{args.partitions} partitions written to {args.out}; replay on: {HOST}",
              file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
