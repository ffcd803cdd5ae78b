"""One partition of the ntt workload, both sides: CPU synthesis and the GPU prover, by size.

    python -m bench.gpu_partition [--log-n 24 26 27] [--repeats 10] [--threads 1 8 16]
                                  [--workers 1 2] [--chunk-log2 20]
                                  [--executor threads|processes] [--field goldilocks|babybear]
                                  [--cpu-backend numba numpy]

Per size, on device 0: the prover's time per partition (`gpu.cuda.prover.GpuProver.prove` from
pinned slots, digest only, as the service runs it; median of N after a warm-up) and its phases;
one partition proved with H kept and checked by `gpu.reference.verification.verify` on the CPU; the
GPU's own
throughput with 1, 2 ... provers (threads, each with its stream) on the device, fed from slots
synthesized beforehand; synthesis into pinned slots by 1, 8, 16 ... threads at once
(partitions/s, median seconds per partition) beside the host's memory-copy bandwidth with as
many threads; and what that means for pacing: syntheses needed in flight to keep one GPU busy
(synthesis time ÷ GPU time) and whether this host's cores can (synthesis partitions/s at full
concurrency ÷ GPU partitions/s). With $OUT set, also writes $OUT/gpu_partition.json.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.threads import timed_threads
from bench.usage import doc_parser
from gpu.cuda.ntt import GPU_PHASES
from gpu.cuda.prover import GpuProver
from gpu.field import FIELD_NAMES, by_name
from gpu.field.prime import PrimeField
from gpu.pool.pinned import PinnedPool
from gpu.procs.executor import ProcessSynthesizer
from gpu.reference import cpu_backend, synthesis
from gpu.reference.digest import digest
from gpu.reference.verification import verify
from pacer.cli.table import render

WARMUP_RUNS = 2


def synthesis_rate(
    pool: PinnedPool,
    threads: int,
    partitions: int,
    processes: ProcessSynthesizer | None,
    field: PrimeField,
    backend: str,
) -> tuple[float, float]:
    """(partitions/s, median seconds per partition) with ``threads`` synthesizing at once (each
    through a worker process when ``processes`` is given)."""
    durations: list[float] = []
    lock = threading.Lock()
    counter = iter(range(partitions))

    def run() -> None:
        while True:
            with lock:
                index = next(counter, None)
            if index is None:
                return
            with pool.checkout() as slot:
                started = time.perf_counter()
                if processes is None:
                    synthesis.synthesize_into(7, index, slot.arrays, step=synthesis.THREADED_STEP,
                                        field=field, backend=backend)  # fmt: skip
                else:
                    processes.fill(pool.slot_block(slot), 7, index, field)
                took = time.perf_counter() - started
            with lock:
                durations.append(took)

    seconds = timed_threads([run] * threads)
    return partitions / seconds, statistics.median(durations)


def copy_bandwidth(threads: int, nbytes: int = 256 * 2**20, rounds: int = 8) -> float:
    """Bytes/s that ``threads`` threads copying their own arrays move (read + write)."""
    arrays = [(np.ones(nbytes // 8), np.empty(nbytes // 8)) for _ in range(threads)]

    def run(pair: tuple[Any, Any]) -> None:
        for _ in range(rounds):
            np.copyto(pair[1], pair[0])

    seconds = timed_threads([functools.partial(run, pair) for pair in arrays])
    return 2 * nbytes * rounds * threads / seconds


def gpu_throughput(
    provers: list[GpuProver], pool: PinnedPool, rounds: int, field: PrimeField
) -> float:
    """Partitions/s with every prover proving its own ready slot ``rounds`` times at once."""
    slots = [pool.checkout() for _ in provers]
    try:
        for i, slot in enumerate(slots):
            synthesis.synthesize_into(11, i, slot.arrays, field=field)
            provers[i].prove(*slot.arrays)  # warm

        def prove_rounds(prover: GpuProver, slot: Any) -> None:
            for _ in range(rounds):
                prover.prove(*slot.arrays)

        seconds = timed_threads(
            [functools.partial(prove_rounds, p, s) for p, s in zip(provers, slots, strict=True)]
        )
        return rounds * len(provers) / seconds
    finally:
        for slot in slots:
            slot.release()


def measure(
    log_n: int,
    repeats: int,
    thread_counts: list[int],
    worker_counts: list[int],
    executor: str,
    field: PrimeField,
    backends: list[str],
) -> dict[str, Any]:
    n = 1 << log_n
    slots = max(thread_counts)
    slot_gib = 3 * field.storage.itemsize * n / 2**30
    print(f"2^{log_n}: pinning {slots} slots of {slot_gib:.2f} GiB", file=sys.stderr)
    began = time.perf_counter()
    backend: Any = "shared-cuda" if executor == "processes" else "cuda"
    pool = PinnedPool.build(
        slots, [(n,)] * 3, dtype=field.storage, backend=backend, on_empty="wait"
    )
    pin_s = time.perf_counter() - began
    try:
        prover = GpuProver(0, log_n, field)
        with pool.checkout() as slot:
            synthesis.synthesize_into(3, 0, slot.arrays, field=field)
            checked = prover.prove(*slot.arrays, keep_h=True)
            assert checked.h is not None
            began = time.perf_counter()
            a, b, c = (v.astype(np.uint64, copy=False) for v in slot.arrays)
            verified = (
                bool(verify(a, b, c, checked.h, field=field))
                and digest(checked.h, field=field) == checked.digest
            )
            verify_s = time.perf_counter() - began
            for _ in range(WARMUP_RUNS):
                prover.prove(*slot.arrays)
            totals: list[float] = []
            phases: dict[str, list[float]] = {p: [] for p in GPU_PHASES}
            for _ in range(repeats):
                began = time.perf_counter()
                result = prover.prove(*slot.arrays)
                totals.append(time.perf_counter() - began)
                for p, s in result.phases_s.items():
                    phases[p].append(s)
        gpu_s = statistics.median(totals)
        provers = [prover] + [GpuProver(0, log_n, field) for _ in range(max(worker_counts) - 1)]
        rounds = max(repeats, 10)
        gpu_rates = {w: gpu_throughput(provers[:w], pool, rounds, field) for w in worker_counts}
        rates: dict[str, dict[int, tuple[float, float]]] = {k: {} for k in backends}
        for backend in backends:
            for threads in thread_counts:
                print(f"2^{log_n}: synthesis ({backend}) on {threads} threads", file=sys.stderr)
                processes = None
                if executor == "processes":
                    processes = ProcessSynthesizer(threads, pool.block_names, backend=backend,
                                                   field=field)  # fmt: skip
                    processes.start()
                elif backend == "numba":
                    cpu_backend.warm(field)
                try:
                    partitions = max(3 * threads, 4)
                    rates[backend][threads] = synthesis_rate(pool, threads, partitions, processes,
                                                            field, backend)  # fmt: skip
                finally:
                    if processes is not None:
                        processes.close()
        copy_rates = {t: copy_bandwidth(t) for t in thread_counts}
    finally:
        pool.close()
    # Pacing follows the first CPU backend named (the one the service would use).
    single = rates[backends[0]][min(thread_counts)][1]
    best_rate = max(rate for rate, _ in rates[backends[0]].values())
    return {
        "log_n": log_n,
        "field": field.name,
        "pin_s": pin_s,
        "verified": verified,
        "verify_s": verify_s,
        "gpu_s": gpu_s,
        "phases_ms": {p: 1000 * statistics.median(v) for p, v in phases.items()},
        "gpu_partitions_per_s": gpu_rates,
        "copy_gb_per_s": {t: r / 1e9 for t, r in copy_rates.items()},
        "synthesis": {
            k: {t: {"per_s": r, "median_s": m} for t, (r, m) in by_threads.items()}
            for k, by_threads in rates.items()
        },
        "syntheses_to_keep_a_gpu_busy": single / gpu_s,
        "cores_over_gpu": best_rate / gpu_rates[min(worker_counts)],
    }


def main() -> int:
    parser = doc_parser(__doc__)
    parser.add_argument("--log-n", type=int, nargs="+", default=[24, 26, 27])
    parser.add_argument("--repeats", type=int, default=10, help="timed proofs per size")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="provers per GPU")
    parser.add_argument(
        "--chunk-log2",
        type=int,
        default=synthesis.THREADED_STEP.bit_length() - 1,
        help="threads executor: log2 of the elements a synthesis handles per step (fewer "
        "steps: fewer GIL handoffs); worker processes keep cache-sized steps",
    )
    parser.add_argument(
        "--executor",
        choices=("threads", "processes"),
        default="processes",
        help="synthesis on threads of this process, or in worker processes writing into "
        "shared slots pinned with cudaHostRegister",
    )
    parser.add_argument("--field", choices=FIELD_NAMES, default="goldilocks")
    parser.add_argument(
        "--cpu-backend",
        choices=cpu_backend.CPU_BACKENDS,
        nargs="+",
        default=["numba" if cpu_backend.numba_available() else "numpy"],
        help="CPU backends of synthesis to time, each at every thread count (default: the one "
        "PACER_NTT__CPU_BACKEND=auto picks here); pacing figures follow the first",
    )
    args = parser.parse_args()
    synthesis.THREADED_STEP = 1 << args.chunk_log2
    field = by_name(args.field)
    print(f"{field.name}; synthesis on {args.executor}", file=sys.stderr)
    if args.executor == "threads":
        print(f"synthesis steps of 2^{args.chunk_log2} elements", file=sys.stderr)
    results = [
        measure(n, args.repeats, args.threads, args.workers, args.executor, field, args.cpu_backend)
        for n in args.log_n
    ]
    headers = ("log_n", "GPU ms/partition", *(f"{p} ms" for p in GPU_PHASES), "verified (CPU s)")
    rows = [
        (r["log_n"], f"{1000 * r['gpu_s']:.1f}", *(f"{r['phases_ms'][p]:.1f}" for p in GPU_PHASES),
         f"{r['verified']} ({r['verify_s']:.1f})")
        for r in results
    ]  # fmt: skip
    print(render(headers, rows))
    headers = ("log_n", "provers on the GPU", "GPU partitions/s (synthesis aside)")
    rows = [
        (r["log_n"], w, f"{rate:.2f}")
        for r in results
        for w, rate in r["gpu_partitions_per_s"].items()
    ]
    print(render(headers, rows))
    headers = ("log_n", "CPU backend", "threads", "synthesis partitions/s", "s/partition (median)",
               "host copy GB/s", "pin s")  # fmt: skip
    rows = [
        (r["log_n"], k, t, f"{s['per_s']:.2f}", f"{s['median_s']:.2f}",
         f"{r['copy_gb_per_s'][t]:.1f}", f"{r['pin_s']:.1f}")
        for r in results
        for k, by_threads in r["synthesis"].items()
        for t, s in by_threads.items()
    ]  # fmt: skip
    print(render(headers, rows))
    headers = (
        "log_n",
        "syntheses in flight per busy GPU",
        "synthesis capacity ÷ GPU rate (1 prover)",
    )
    rows = [
        (r["log_n"], f"{r['syntheses_to_keep_a_gpu_busy']:.1f}", f"{r['cores_over_gpu']:.2f}")
        for r in results
    ]
    print(render(headers, rows))
    out = os.environ.get("OUT")
    if out:
        Path(out, "gpu_partition.json").write_text(json.dumps(results, indent=2))
    return 0 if all(r["verified"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
