"""Host-to-device copy rates on a GPU: pinned (cudaHostAlloc) against pageable memory.

    python -m bench.gpu_h2d [--mib 256 1024] [--repeats 20]

For each size: the rate of allocating pinned memory (cudaHostAlloc through CuPy), then H2D of
that buffer and of an ordinary NumPy buffer of the same size, each timed with CUDA events on a
non-blocking stream (median of ``--repeats`` after two warm-ups), in GB/s (10^9 bytes/s). The
inputs are random, never zeros. Writes ``$OUT/gpu_h2d.json`` when OUT is set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from pacer.cli.table import render


def timed_copies(cp: Any, host: np.ndarray, repeats: int) -> float:
    """Median seconds of one H2D copy of ``host`` into a device buffer."""
    stream = cp.cuda.Stream(non_blocking=True)
    device = cp.empty(host.shape, dtype=host.dtype)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for k in range(repeats + 2):
        start.record(stream)
        device.set(host, stream=stream)
        end.record(stream)
        end.synchronize()
        if k >= 2:
            times.append(cp.cuda.get_elapsed_time(start, end) / 1000.0)
    if not np.array_equal(device[:1024].get(), host[:1024]):
        raise SystemExit("H2D copy gave wrong data")
    return float(statistics.median(times))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[256, 1024], help="sizes (MiB)")
    parser.add_argument("--repeats", type=int, default=20, help="timed copies per case (20)")
    args = parser.parse_args()
    try:
        import cupy as cp
    except ImportError:
        print("bench.gpu_h2d needs CuPy and a GPU", file=sys.stderr)
        return 2
    rng = np.random.default_rng(1)
    rows = []
    results = []
    for mib in args.mib:
        nbytes = mib * 2**20
        count = nbytes // 8
        started = time.perf_counter()
        memory = cp.cuda.alloc_pinned_memory(nbytes)
        alloc_s = time.perf_counter() - started
        pinned = np.frombuffer(memory, dtype=np.uint64, count=count)
        pinned[:] = rng.integers(0, 2**63, count, dtype=np.uint64)
        pageable = pinned.copy()
        pinned_s = timed_copies(cp, pinned, args.repeats)
        pageable_s = timed_copies(cp, pageable, args.repeats)
        result = {
            "mib": mib,
            "pinned_gb_s": nbytes / pinned_s / 1e9,
            "pageable_gb_s": nbytes / pageable_s / 1e9,
            "host_alloc_gib_s": nbytes / alloc_s / 2**30,
        }
        results.append(result)
        rows.append(
            (mib, f"{result['pinned_gb_s']:.1f}", f"{result['pageable_gb_s']:.1f}",
             f"{result['pinned_gb_s'] / result['pageable_gb_s']:.1f}x",
             f"{result['host_alloc_gib_s']:.2f}")
        )  # fmt: skip
        del pinned, memory
    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"{name}, CuPy {cp.__version__}, median of {args.repeats} copies, CUDA events")
    print(render(("MiB", "pinned H2D GB/s", "pageable H2D GB/s", "ratio", "cudaHostAlloc GiB/s"),
                 rows))  # fmt: skip
    out = os.environ.get("OUT")
    if out:
        Path(out, "gpu_h2d.json").write_text(json.dumps({"device": name, "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
