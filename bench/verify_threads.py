"""Verification beside synthesis in processes: on the synthesis threads, or on threads of its own.

    python -m bench.verify_threads [--processes 8] [--synthesis-s 0.1] [--prove-s 0.008]
                                   [--verify-s 2.4] [--verify-every 100] [--repeats 3]
                                   [--warmup 5] [--seconds 20] [--markdown]

Runs the service's `Pipeline`, paced by pi, on real threads and a real event loop, with a
workload whose calls sleep: a synthesis thread waits ``--synthesis-s`` as it waits on its process,
a proof takes ``--prove-s`` on one worker, and a verification holds its thread ``--verify-s``. The
default is an H100 host at 8 processes of 1.0 s, GPUs at 12.5 partitions a second and a
Goldilocks 2^27 verification of 24 s every 100th partition, ten times faster. Sleeping calls take
no core, so this measures what a verification costs the processes it stops feeding, not the core
it takes (on a host whose synthesis takes every core, that core comes out of the processes'
time wherever verification runs).

Arms, interleaved (A B C D, ``--repeats`` times): ``shared`` (verification on the synthesis
threads, as before D201), ``own-1`` and ``own-2`` (one or two threads of its own), ``none`` (no
verification). Per arm: partitions/s over ``--seconds`` after ``--warmup``, partitions verified
and skipped, and mean partitions in flight, each the mean over the repeats ± its 95 % half-width.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

import uvloop

from bench.stats import interval
from bench.usage import doc_parser
from pacer.cli.table import render
from pacer.config import ControllerSettings
from pacer.control.controller import PIController
from pacer.control.policy import Caps
from pacer.pipeline import Outcome, Pipeline
from pacer.workload import PartitionSpec, Proof, Workload

ARMS = {"shared": (True, 0), "own-1": (True, 1), "own-2": (True, 2), "none": (False, 0)}
"""Arm → (verifies, verify threads; 0: on the synthesis threads)."""


class Sleeping(Workload):
    """Calls that sleep: synthesis ``synthesis_s`` (± 5 %, seeded), prove ``prove_s``, verify
    ``verify_s`` (seconds)."""

    name = "sleeping"

    def __init__(self, synthesis_s: float, prove_s: float, verify_s: float, seed: int) -> None:
        self.synthesis_s, self.prove_s, self.verify_s = synthesis_s, prove_s, verify_s
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.verified = 0

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return dict(params)

    def partition_bytes(self, params: Mapping[str, Any]) -> int:
        return 1

    def synthesize(self, spec: PartitionSpec) -> Any:
        with self._lock:
            jitter = self._random.gauss(1.0, 0.05)
        time.sleep(self.synthesis_s * max(0.5, jitter))
        return spec.index

    def prove(self, buffers: Any, worker: int, keep_output: bool = True) -> Proof:
        time.sleep(self.prove_s)
        return Proof(f"d{buffers}", {}, buffers if keep_output else None)

    def verify(self, spec: PartitionSpec, buffers: Any, proof: Proof) -> bool:
        time.sleep(self.verify_s)
        with self._lock:
            self.verified += 1
        return True


async def run_arm(args: argparse.Namespace, arm: str, seed: int) -> dict[str, float]:
    """One run of ``arm``: the service's pipeline under pi, a backlog that never runs out."""
    verifies, threads = ARMS[arm]
    workload = Sleeping(args.synthesis_s, args.prove_s, args.verify_s, seed)
    caps = Caps(synthesis_concurrency=args.processes, inflight_partitions=args.budget)
    outcomes: list[Outcome] = []
    policy = PIController(ControllerSettings(), caps, time.monotonic)
    pipeline = Pipeline(policy, workload, caps, workers=1, budget_bytes=args.budget,
                        on_outcome=outcomes.append,
                        verify_every=args.verify_every if verifies else 0,
                        verify_threads=threads)  # fmt: skip
    pipeline.enqueue("bench", 1, {}, list(range(10**7)))
    pipeline.start()
    await asyncio.sleep(args.warmup)
    done0, verified0, skipped0 = len(outcomes), workload.verified, pipeline.verifications_skipped
    began = time.monotonic()
    inflight: list[int] = []
    while time.monotonic() - began < args.seconds:
        await asyncio.sleep(0.05)
        inflight.append(pipeline.inflight)
    elapsed = time.monotonic() - began
    row = {
        "partitions_per_s": (len(outcomes) - done0) / elapsed,
        "verified": float(workload.verified - verified0),
        "skipped": float(pipeline.verifications_skipped - skipped0),
        "inflight": statistics.fmean(inflight),
    }
    pipeline.hold(True)
    await pipeline.drain(args.verify_s * 4 + 10)
    await pipeline.close()
    return row


def table(runs: dict[str, list[dict[str, float]]], markdown: bool) -> str:
    keys = (("partitions_per_s", 2), ("verified", 1), ("skipped", 1), ("inflight", 1))
    rows = []
    for arm, rs in runs.items():
        cells = []
        for key, digits in keys:
            mean, half = interval([r[key] for r in rs])
            cells.append(f"{mean:.{digits}f} ± {half:.{digits}f}")
        rows.append((arm, len(rs), *cells))
    headers = ("arm", "runs", "partitions/s", "verified", "skipped", "in flight")
    return render(headers, rows, markdown=markdown)


def main() -> int:
    parser = doc_parser(__doc__)
    parser.add_argument("--processes", type=int, default=8, help="synthesis threads")
    parser.add_argument("--synthesis-s", type=float, default=0.1, help="a synthesis (s)")
    parser.add_argument("--prove-s", type=float, default=0.008, help="a proof (s)")
    parser.add_argument("--verify-s", type=float, default=2.4, help="a verification (s)")
    parser.add_argument("--verify-every", type=int, default=100, help="PACER_VERIFY_EVERY")
    parser.add_argument("--budget", type=int, default=64, help="partitions in flight, at most")
    arms_help = "comma-separated: " + ", ".join(ARMS)
    parser.add_argument("--arms", default=",".join(ARMS), help=arms_help)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each arm, interleaved")
    parser.add_argument("--warmup", type=float, default=5.0, help="before measuring (s)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured (s)")
    parser.add_argument("--markdown", action="store_true", help="the table as Markdown")
    args = parser.parse_args()
    arms = args.arms.split(",")
    unknown = set(arms) - set(ARMS)
    if unknown:
        parser.error(f"--arms: unknown {', '.join(sorted(unknown))}; known: {', '.join(ARMS)}")
    runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    for repeat in range(args.repeats):
        for arm in arms:
            row = uvloop.run(run_arm(args, arm, seed=repeat))
            runs[arm].append(row)
            print(f"repeat {repeat} {arm}: {row['partitions_per_s']:.2f}/s, verified "
                  f"{row['verified']:.0f}, skipped {row['skipped']:.0f}, in flight "
                  f"{row['inflight']:.1f}", file=sys.stderr, flush=True)  # fmt: skip
    print(table(runs, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
