"""One radix-4 NTT pass on a GPU: BabyBear (32-bit) against Goldilocks (64-bit) arithmetic.

    python -m bench.gpu_field_cost [--repeats 5]

The pass is the shape of `gpu.cuda.ntt`'s ``ntt_stage2`` (two butterfly levels a thread, four
elements read and written), built twice from one template: BabyBear, p = 15·2^27 + 1, in
uint32 with the product reduced by ``%``, as the service's kernels do; Goldilocks,
p = 2^64 − 2^32 + 1, in uint64 with the 128-bit product from ``__umul64hi`` and the usual
reduction by 2^64 ≡ 2^32 − 1. Each runs every pass a transform of its size has past a
2^11-element head, on random inputs, timed with CUDA events (median over ``--repeats`` sets
after a warm-up set). Prints ms per pass and the bytes moved per second (each element read and
written once); writes ``$OUT/gpu_field_cost.json`` when OUT is set. It answers what a
partition would cost in the other field: whether the passes are bound by arithmetic or by
device memory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from typing import Any

from pacer.cli.table import render

SOURCE = r"""
typedef unsigned int u32;
typedef unsigned long long u64;

#define BB_P 2013265921u
__device__ __forceinline__ u32 bb_mul(u32 a, u32 b) { return (u32)(((u64)a * b) % BB_P); }
__device__ __forceinline__ u32 bb_add(u32 a, u32 b) {
    u32 s = a + b;
    return s >= BB_P ? s - BB_P : s;
}
__device__ __forceinline__ u32 bb_sub(u32 a, u32 b) { return a >= b ? a - b : a + BB_P - b; }

#define GL_P 0xffffffff00000001ull
#define GL_EPSILON 0xffffffffull  /* 2^64 mod p */
__device__ __forceinline__ u64 gl_add(u64 a, u64 b) {
    u64 s = a + b;
    s += (s < a) ? GL_EPSILON : 0;
    return s >= GL_P ? s - GL_P : s;
}
__device__ __forceinline__ u64 gl_sub(u64 a, u64 b) { return a >= b ? a - b : a - b + GL_P; }
__device__ __forceinline__ u64 gl_mul(u64 a, u64 b) {
    u64 lo = a * b, hi = __umul64hi(a, b);
    u64 hi_hi = hi >> 32, hi_lo = hi & GL_EPSILON;
    u64 t = lo - hi_hi;              /* 2^96 = -1 */
    if (lo < hi_hi) t -= GL_EPSILON;
    u64 m = hi_lo * GL_EPSILON;      /* 2^64 = 2^32 - 1 */
    u64 r = t + m;
    if (r < m) r += GL_EPSILON;
    return r >= GL_P ? r - GL_P : r;
}

#define STAGE(NAME, T, MUL, ADD, SUB)                                                       \
extern "C" __global__ void NAME(T* d, const T* tw, u32 quarter_n, int stage) {              \
    u32 t = blockIdx.x * blockDim.x + threadIdx.x;                                          \
    if (t >= quarter_n) return;                                                             \
    u32 m = 1u << stage, j = t & (m - 1);                                                   \
    u32 i0 = ((t >> stage) << (stage + 2)) + j, i1 = i0 + m, i2 = i0 + 2 * m, i3 = i0 + 3 * m; \
    T w = tw[m - 1 + j];                                                                    \
    T x0 = d[i0], x1 = MUL(d[i1], w), x2 = d[i2], x3 = MUL(d[i3], w);                       \
    T y0 = ADD(x0, x1), y1 = SUB(x0, x1), y2 = ADD(x2, x3), y3 = SUB(x2, x3);               \
    T v2 = MUL(y2, tw[2 * m - 1 + j]), v3 = MUL(y3, tw[2 * m - 1 + j + m]);                 \
    d[i0] = ADD(y0, v2); d[i2] = SUB(y0, v2); d[i1] = ADD(y1, v3); d[i3] = SUB(y1, v3);     \
}
STAGE(babybear_stage, u32, bb_mul, bb_add, bb_sub)
STAGE(goldilocks_stage, u64, gl_mul, gl_add, gl_sub)
"""

CASES = (("BabyBear", "babybear_stage", 4, 27), ("Goldilocks", "goldilocks_stage", 8, 26),
         ("Goldilocks", "goldilocks_stage", 8, 27))  # fmt: skip
"""(field, kernel, bytes an element, log2 of the size)."""
_HEAD_LOG = 11
_BLOCK = 256


def measure(cp: Any, module: Any, kernel_name: str, item: int, log_n: int, repeats: int) -> float:
    """Median ms of one pass over 2^log_n elements."""
    n = 1 << log_n
    dtype = cp.uint32 if item == 4 else cp.uint64
    rng = cp.random.default_rng(log_n)
    # Random elements below both moduli; the passes read twiddles from a table as long as data.
    data = rng.integers(0, 2**31 - 2**27, n, dtype=cp.uint64).astype(dtype)
    twiddles = rng.integers(0, 2**31 - 2**27, n, dtype=cp.uint64).astype(dtype)
    kernel = module.get_function(kernel_name)
    quarter = n // 4
    grid = (quarter + _BLOCK - 1) // _BLOCK
    stages = list(range(_HEAD_LOG, log_n - 1, 2))

    def one_set() -> None:
        for stage in stages:
            kernel((grid,), (_BLOCK,), (data, twiddles, cp.uint32(quarter), cp.int32(stage)))

    one_set()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        one_set()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / len(stages))
    return float(statistics.median(times))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed sets of passes")
    args = parser.parse_args()
    import cupy as cp

    module = cp.RawModule(code=SOURCE, options=("-std=c++14",))
    rows, results = [], []
    for field_name, kernel_name, item, log_n in CASES:
        ms = measure(cp, module, kernel_name, item, log_n, args.repeats)
        moved = 2 * item * (1 << log_n)  # each element read and written once
        results.append({"field": field_name, "log_n": log_n, "ms_per_pass": ms,
                        "gb_per_s": moved / ms / 1e6})  # fmt: skip
        rows.append((field_name, f"2^{log_n}", f"{moved / 2 / 2**20:.0f}", f"{ms:.3f}",
                     f"{moved / ms / 1e6:.0f}"))  # fmt: skip
    print(render(("field", "size", "MiB", "ms per pass", "GB/s (read + write)"), rows))
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "gpu_field_cost.json"), "w") as handle:
            json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
