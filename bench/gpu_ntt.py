"""Time the CUDA H computation phase by phase, after checking it against NumPy bit for bit.

    python -m bench.gpu_ntt [--log-n 16 18 20] [--repeats 20] [--markdown]
                            [--field babybear|goldilocks]

Per size: one `gpu.cuda.ntt.CudaHSteps.run` on fresh random partitions must equal
`gpu.reference.ntt.HSteps.run` exactly (exit 1 if not); then, with a, b, c and h in pinned host
memory
and every launch on one non-blocking stream, each phase is timed with CUDA events over N runs
after a warm-up. Prints the median milliseconds per phase and in total, and the H2D rate for
the three input vectors. With $OUT set, also writes the results to $OUT/gpu_ntt.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu.cuda import ntt as ntt_cuda
from gpu.cuda.devices import device_count
from gpu.field import FIELD_NAMES, by_name
from gpu.reference.digest import digest
from gpu.reference.ntt import HSteps
from gpu.reference.synthesis import synthesize
from pacer.cli.table import render

SIZES_LOG_N = (16, 18, 20)
WARMUP_RUNS = 3


def pinned_vector(cupy: Any, n: int, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """n elements of ``dtype`` in page-locked host memory (kept alive by the array's base)."""
    memory = cupy.cuda.alloc_pinned_memory(dtype.itemsize * n)
    return np.frombuffer(memory, dtype=dtype, count=n)


def check_identity(steps: ntt_cuda.CudaHSteps, seed: int) -> str | None:
    """None when the device result equals the reference; else what differs."""
    field = steps.field
    a, b, c = synthesize(seed=seed, index=0, log_n=steps.log_n, field=field)
    expected = HSteps(steps.log_n, field).run(a, b, c)
    got = steps.run(a, b, c)
    if digest(got, field=field) == digest(expected, field=field):
        return None
    wrong = np.flatnonzero(got != expected)
    return (
        f"2^{steps.log_n} (seed {seed}): {wrong.size} of {steps.n} coefficients differ, "
        f"first at [{wrong[0]}]: {got[wrong[0]]} on the GPU, {expected[wrong[0]]} in NumPy"
    )


def time_phases(cupy: Any, steps: ntt_cuda.CudaHSteps, repeats: int) -> dict[str, list[float]]:
    """Milliseconds of each phase of ``repeats`` pinned-memory runs, after a warm-up."""
    n = steps.n
    field = steps.field
    a, b, c, out = (pinned_vector(cupy, n, field.storage) for _ in range(4))
    bits = np.random.SFC64()
    for vector in (a, b, c):
        field.random_elements(bits, vector)
    stream = steps.stream
    events = [cupy.cuda.Event() for _ in range(len(ntt_cuda.GPU_PHASES) + 1)]
    times_ms: dict[str, list[float]] = {name: [] for name in (*ntt_cuda.GPU_PHASES, "total")}
    for run in range(WARMUP_RUNS + repeats):
        events[0].record(stream)
        inputs = steps.h2d(a, b, c)
        events[1].record(stream)
        coeffs = steps.intt(*inputs)
        events[2].record(stream)
        evals = steps.coset_ntt(*coeffs)
        events[3].record(stream)
        h_evals = steps.pointwise(*evals)
        events[4].record(stream)
        h = steps.coset_intt(h_evals)
        events[5].record(stream)
        steps.d2h(h, out)
        events[6].record(stream)
        events[6].synchronize()
        if run < WARMUP_RUNS:
            continue
        for i, name in enumerate(ntt_cuda.GPU_PHASES):
            times_ms[name].append(cupy.cuda.get_elapsed_time(events[i], events[i + 1]))
        times_ms["total"].append(cupy.cuda.get_elapsed_time(events[0], events[-1]))
    return times_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--log-n", type=int, nargs="+", default=list(SIZES_LOG_N), metavar="K", help="sizes 2^K"
    )
    parser.add_argument(
        "--repeats", type=int, default=20, metavar="N", help="timed runs per size (default 20)"
    )
    parser.add_argument("--markdown", action="store_true", help="Markdown table")
    parser.add_argument("--field", choices=FIELD_NAMES, default="goldilocks")
    args = parser.parse_args()
    field = by_name(args.field)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    for log_n in args.log_n:
        if not 1 <= log_n <= field.TWO_ADICITY:
            parser.error(f"--log-n must be between 1 and {field.TWO_ADICITY}, got {log_n}")
    if device_count() == 0:
        print("no CUDA device: needs cupy and a GPU", file=sys.stderr)
        return 2
    import cupy

    device_name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()
    rng = np.random.default_rng()
    rows = []
    results: list[dict[str, Any]] = []
    for log_n in args.log_n:
        stream = cupy.cuda.Stream(non_blocking=True)
        steps = ntt_cuda.CudaHSteps(log_n, stream=stream, field=field)
        for _ in range(2):
            mismatch = check_identity(steps, seed=int(rng.integers(2**32)))
            if mismatch is not None:
                print(f"GPU result differs from NumPy: {mismatch}", file=sys.stderr)
                return 1
        times_ms = time_phases(cupy, steps, args.repeats)
        median_ms = {name: statistics.median(values) for name, values in times_ms.items()}
        h2d_gb_s = 3 * field.storage.itemsize * steps.n / (median_ms["h2d"] * 1e-3) / 1e9
        rows.append(
            (
                log_n,
                steps.n,
                *(f"{median_ms[name]:.3f}" for name in (*ntt_cuda.GPU_PHASES, "total")),
                f"{h2d_gb_s:.1f}",
            )
        )
        results.append(
            {
                "log_n": log_n,
                "field": field.name,
                "n": steps.n,
                "bit_identical": True,
                "median_ms": median_ms,
                "times_ms": times_ms,
                "h2d_gb_s": h2d_gb_s,
            }
        )
    headers = ("log_n", "n", *(f"{name} ms" for name in ntt_cuda.GPU_PHASES), "total ms")
    print(render((*headers, "H2D GB/s"), rows, markdown=args.markdown))
    print()
    print(
        f"{field.name}; median of {args.repeats} after {WARMUP_RUNS} warm-up runs; {device_name}, "
        f"cupy {cupy.__version__}, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}; "
        "bit-identical to gpu.reference.ntt on 2 fresh partitions per size"
    )
    out_dir = os.environ.get("OUT")
    if out_dir:
        report = {
            "device": device_name,
            "cupy": cupy.__version__,
            "repeats": args.repeats,
            "warmup_runs": WARMUP_RUNS,
            "sizes": results,
        }
        (Path(out_dir) / "gpu_ntt.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
