"""The CUDA C++ of the H computation's kernels (`cuda_source`) and one transform's launches.

`gpu.cuda.ntt` compiles and drives them; this module imports without CuPy. The kernels are
written once over ``elem`` and the field's arithmetic (`gpu.field.prime.PrimeField.CUDA`), and
compiled per field and device. A transform of n = 2^k points makes these launches
(`launch_plan`):

* ``ntt_head``: one block per tile of 2^t points, t = min(k, 11). It gathers its tile in
  bit-reversed order, maybe scaled for the coset shift, and runs stages 0 .. t−1 in shared
  memory.
* ``ntt_stage2``: the remaining stages two at a time (radix-4 over global memory).
* ``ntt_stage``: one last radix-2 stage when an odd number remain.

The last launch applies the output scale (`OUT_SCALAR`, `OUT_VECTOR`), so scaling costs no pass.
``h_pointwise`` computes (a·b − c)·Z⁻¹. ``h_digest`` folds `gpu.reference.digest.digest_lanes`.
``power_table`` fills the twiddle and coset tables on the device, so no table crosses from the
host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpu.field.prime import PrimeField

__all__ = [
    "BLOCK",
    "HEAD_LOG_TILE",
    "KERNEL_NAMES",
    "MAX_LOG_N",
    "OUT_NONE",
    "OUT_SCALAR",
    "OUT_VECTOR",
    "Launch",
    "check_log_n",
    "cuda_source",
    "launch_plan",
]

HEAD_LOG_TILE = 11
"""log2 of the points one ``ntt_head`` block transforms in shared memory (1024 threads)."""
KERNEL_NAMES = ("ntt_head", "ntt_stage2", "ntt_stage", "h_pointwise", "h_digest", "power_table")
"""The ``extern "C"`` kernels of `cuda_source`."""
MAX_LOG_N = 30
"""The longest transform on a device (indices are 32-bit), where the field allows it."""
BLOCK = 256
"""Threads per block of every kernel but ``ntt_head``."""
OUT_NONE, OUT_SCALAR, OUT_VECTOR = 0, 1, 2
"""A transform kernel's ``out_mode``: no output scale, one scalar, or one factor an element."""

_TYPES = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
"""

_KERNELS = r"""
static __device__ __forceinline__ elem scale_out(elem v, u32 i, int mode, elem scalar,
                                                 const elem* __restrict__ vec) {
    if (mode == 1) return fmul(v, scalar);
    if (mode == 2) return fmul(v, vec[i]);
    return v;
}

/* Twiddles of all stages, back to back: stage s (half-span m = 2^s) starts at m - 1. */

extern "C" __global__ void ntt_head(const elem* __restrict__ src, elem* __restrict__ dst,
                                    const elem* __restrict__ twiddles,
                                    const elem* __restrict__ in_scale, int in_mode,
                                    const elem* __restrict__ out_vec, elem out_scalar,
                                    int out_mode, int log_n, int log_tile) {
    __shared__ elem tile[1 << 11];
    const u32 t = threadIdx.x;
    const u32 half = 1u << (log_tile - 1);
    const u32 base = blockIdx.x << log_tile;
    for (int r = 0; r < 2; ++r) {
        const u32 pos = t + r * half;
        const u32 from = __brev(base + pos) >> (32 - log_n);
        elem v = src[from];
        if (in_mode) v = fmul(v, in_scale[from]);
        tile[pos] = v;
    }
    __syncthreads();
    for (int s = 0; s < log_tile; ++s) {
        const u32 m = 1u << s;
        const u32 j = t & (m - 1);
        const u32 i0 = ((t >> s) << (s + 1)) + j;
        const elem w = twiddles[m - 1 + j];
        const elem lo = tile[i0];
        const elem hi = fmul(tile[i0 + m], w);
        tile[i0] = fadd(lo, hi);
        tile[i0 + m] = fsub(lo, hi);
        __syncthreads();
    }
    for (int r = 0; r < 2; ++r) {
        const u32 pos = t + r * half;
        dst[base + pos] = scale_out(tile[pos], base + pos, out_mode, out_scalar, out_vec);
    }
}

extern "C" __global__ void ntt_stage2(elem* __restrict__ data, const elem* __restrict__ twiddles,
                                      const elem* __restrict__ out_vec, elem out_scalar,
                                      int out_mode, u32 quarter_n, int stage) {
    const u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= quarter_n) return;
    const u32 m = 1u << stage;
    const u32 j = t & (m - 1);
    const u32 i0 = ((t >> stage) << (stage + 2)) + j;
    const u32 i1 = i0 + m, i2 = i0 + 2 * m, i3 = i0 + 3 * m;
    /* stage s: (i0, i1) and (i2, i3), twiddle j of stage s */
    const elem w = twiddles[m - 1 + j];
    const elem x0 = data[i0], x1 = fmul(data[i1], w);
    const elem x2 = data[i2], x3 = fmul(data[i3], w);
    const elem y0 = fadd(x0, x1), y1 = fsub(x0, x1);
    const elem y2 = fadd(x2, x3), y3 = fsub(x2, x3);
    /* stage s + 1 (half-span 2m): (i0, i2) with twiddle j, (i1, i3) with twiddle j + m */
    const elem v2 = fmul(y2, twiddles[2 * m - 1 + j]);
    const elem v3 = fmul(y3, twiddles[2 * m - 1 + j + m]);
    data[i0] = scale_out(fadd(y0, v2), i0, out_mode, out_scalar, out_vec);
    data[i2] = scale_out(fsub(y0, v2), i2, out_mode, out_scalar, out_vec);
    data[i1] = scale_out(fadd(y1, v3), i1, out_mode, out_scalar, out_vec);
    data[i3] = scale_out(fsub(y1, v3), i3, out_mode, out_scalar, out_vec);
}

extern "C" __global__ void ntt_stage(elem* __restrict__ data, const elem* __restrict__ twiddles,
                                     const elem* __restrict__ out_vec, elem out_scalar,
                                     int out_mode, u32 half_n, int stage) {
    const u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= half_n) return;
    const u32 m = 1u << stage;
    const u32 j = t & (m - 1);
    const u32 i0 = ((t >> stage) << (stage + 1)) + j;
    const u32 i1 = i0 + m;
    const elem lo = data[i0];
    const elem hi = fmul(data[i1], twiddles[m - 1 + j]);
    data[i0] = scale_out(fadd(lo, hi), i0, out_mode, out_scalar, out_vec);
    data[i1] = scale_out(fsub(lo, hi), i1, out_mode, out_scalar, out_vec);
}

extern "C" __global__ void h_pointwise(const elem* __restrict__ a, const elem* __restrict__ b,
                                       const elem* __restrict__ c, elem* __restrict__ h,
                                       elem z_inverse, u32 n) {
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    h[i] = fmul(fsub(fmul(a[i], b[i]), c[i]), z_inverse);
}

/* A table of powers: out[i] = first·base^e(i), from squares[k] = base^(2^k). Staged, e(i) is
   the twiddle exponent of the transforms' table (i + 1 = 2^s + j: stage s, twiddle j, the
   root raised to j·2^(log_n − 1 − s)); else e(i) = i. */
extern "C" __global__ void power_table(elem* __restrict__ out, const elem* __restrict__ squares,
                                       elem first, u32 count, int log_n, int staged) {
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    u32 e = i;
    if (staged) {
        const u32 t = i + 1;
        const int s = 31 - __clz(t);
        e = (t - (1u << s)) << (log_n - 1 - s);
    }
    elem v = first;
    for (int k = 0; e != 0; ++k, e >>= 1) {
        if (e & 1u) v = fmul(v, squares[k]);
    }
    out[i] = v;
}

/* gpu.reference.digest.digest_lanes: lane t folds elements t, t + lanes, t + 2·lanes, ... by
FNV-1a/64. */
extern "C" __global__ void h_digest(const elem* __restrict__ values, u64* __restrict__ state,
                                    u32 lanes, u32 rows) {
    const u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= lanes) return;
    u64 h = 0xcbf29ce484222325ull;
    for (u32 r = 0; r < rows; ++r) {
        h ^= (u64)values[(u64)r * lanes + t];
        h *= 0x100000001b3ull;
    }
    state[t] = h;
}
"""
"""The kernels over ``elem`` and the field's device functions; `KERNEL_NAMES` lists them."""


def cuda_source(field: PrimeField) -> str:
    """The CUDA C++ of every kernel for ``field``, with its ``elem``, ``FIELD_P`` and arithmetic."""
    elem, suffix = ("u32", "u") if field.storage.itemsize == 4 else ("u64", "ull")
    constants = f"typedef {elem} elem;\n#define FIELD_P {field.P:#x}{suffix}\n"
    return _TYPES + constants + field.CUDA + _KERNELS


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a transform: which kernel, its first stage, grid and block size."""

    kernel: Literal["ntt_head", "ntt_stage2", "ntt_stage"]
    stage: int
    grid: int
    block: int
    last: bool
    """Whether this launch finishes the transform (and so applies the output scale)."""

    @property
    def log_tile(self) -> int:
        """For ``ntt_head``: log2 of the points per block (each thread does two)."""
        return (2 * self.block).bit_length() - 1


def launch_plan(log_n: int, log_tile: int = HEAD_LOG_TILE) -> tuple[Launch, ...]:
    """The launches one transform of 2^log_n points makes, in order.

    >>> [(x.kernel, x.stage) for x in launch_plan(16)]
    [('ntt_head', 0), ('ntt_stage2', 11), ('ntt_stage2', 13), ('ntt_stage', 15)]
    """
    check_log_n(log_n)
    if not 1 <= log_tile <= HEAD_LOG_TILE:
        raise ValueError(f"log_tile must be between 1 and {HEAD_LOG_TILE}, got {log_tile}")
    n = 1 << log_n
    head_bits = min(log_n, log_tile)
    launches = [Launch("ntt_head", 0, n >> head_bits, 1 << (head_bits - 1), head_bits == log_n)]
    stage = head_bits
    while log_n - stage >= 2:
        grid = -(-(n >> 2) // BLOCK)
        launches.append(Launch("ntt_stage2", stage, grid, BLOCK, stage + 2 == log_n))
        stage += 2
    if stage < log_n:
        launches.append(Launch("ntt_stage", stage, -(-(n >> 1) // BLOCK), BLOCK, True))
    return tuple(launches)


def check_log_n(log_n: int, field: PrimeField | None = None) -> None:
    """Raise ValueError unless 1 ≤ log_n ≤ `MAX_LOG_N` and, with ``field``, its two-adicity."""
    high = MAX_LOG_N if field is None else min(MAX_LOG_N, field.TWO_ADICITY)
    if not 1 <= log_n <= high:
        raise ValueError(f"log_n must be between 1 and {high}, got {log_n}")
