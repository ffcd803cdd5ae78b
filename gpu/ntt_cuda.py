"""The Groth16 H computation of `gpu.ntt` on a CUDA device, through CuPy raw kernels.

`CudaHSteps` mirrors `gpu.ntt.HSteps` phase by phase on device arrays and gives the same
canonical elements bit for bit: every kernel does exact arithmetic mod p, the twiddle and coset
tables are `gpu.ntt`'s own host tables uploaded as they are, and the transform is the same
radix-2 decimation-in-time NTT (bit-reversed gather, then log2(n) butterfly stages).

Device vectors hold one canonical element in the field's storage type (``elem``: uint32 for
BabyBear, half the traffic of uint64; uint64 for Goldilocks). The kernels are written once over
``elem`` and the field's ``fmul``/``fadd``/``fsub`` (`gpu.field.PrimeField.CUDA`), and compiled
per field and device.

Launch plan of one transform of n = 2^k points:

* ``ntt_head``: one block per tile of 2^t points, t = min(k, 11). It gathers its tile in
  bit-reversed order (optionally times a per-element scale, for the coset shift), runs stages
  0 .. t−1 in shared memory, and writes the tile back contiguously.
* ``ntt_stage2``: the remaining stages two at a time (a radix-4 pass over global memory).
* ``ntt_stage``: one last radix-2 stage when an odd number remain.

The last launch of a transform applies its output scale (n⁻¹, or n⁻¹·shift^−i for the coset
inverse), so scaling costs no pass of its own. ``h_pointwise`` computes (a·b − c)·Z⁻¹.

CuPy is imported lazily: this module imports without it, and `available` says whether a device
can be used.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from gpu.babybear import BABYBEAR
from gpu.field import FieldArray, PrimeField
from gpu.ntt import DIGEST_LANES, HSteps, _coset_scales, _plan, digest_of_lanes

# The host tables are gpu.ntt's own (same code path, hence the same values); they are private
# there because they are cached and read-only, which is exactly how they are used here.
from gpu.pool import CudaHostAllocator

if TYPE_CHECKING:
    import cupy

__all__ = [
    "HEAD_LOG_TILE",
    "KERNEL_NAMES",
    "MAX_LOG_N",
    "CudaHSteps",
    "HostTables",
    "Launch",
    "available",
    "cuda_source",
    "host_tables",
    "launch_plan",
    "phase_names",
    "release_host_tables",
    "to_device",
]

HEAD_LOG_TILE = 11
"""log2 of the points one ``ntt_head`` block transforms in shared memory (1024 threads)."""
KERNEL_NAMES = ("ntt_head", "ntt_stage2", "ntt_stage", "h_pointwise", "h_digest")
"""The ``extern "C"`` kernels of `cuda_source`."""
MAX_LOG_N = 30
"""The longest transform on a device (indices are 32-bit), where the field allows it."""

_BLOCK = 256
_CACHED_SIZES = 8
_OUT_NONE, _OUT_SCALAR, _OUT_VECTOR = 0, 1, 2
_HOST_TO_DEVICE, _DEVICE_TO_HOST = 1, 2  # cudaMemcpyKind

DeviceArray = Any
"""A ``cupy.ndarray`` of n canonical elements in the field's storage dtype (typed Any: CuPy
ships no stubs)."""

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

/* gpu.ntt.digest_lanes: lane t folds elements t, t + lanes, t + 2·lanes, ... by FNV-1a/64. */
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
    """The CUDA C++ of every kernel for ``field``: its arithmetic, then the kernels."""
    return _TYPES + field.CUDA + _KERNELS


phase_names = ("h2d", "intt", "coset_ntt", "pointwise", "coset_intt", "d2h")
"""The phases `CudaHSteps.run` goes through, in order, as a bench times them."""


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
    _check_log_n(log_n)
    if not 1 <= log_tile <= HEAD_LOG_TILE:
        raise ValueError(f"log_tile must be between 1 and {HEAD_LOG_TILE}, got {log_tile}")
    n = 1 << log_n
    head_bits = min(log_n, log_tile)
    launches = [Launch("ntt_head", 0, n >> head_bits, 1 << (head_bits - 1), head_bits == log_n)]
    stage = head_bits
    while log_n - stage >= 2:
        grid = -(-(n >> 2) // _BLOCK)
        launches.append(Launch("ntt_stage2", stage, grid, _BLOCK, stage + 2 == log_n))
        stage += 2
    if stage < log_n:
        launches.append(Launch("ntt_stage", stage, -(-(n >> 1) // _BLOCK), _BLOCK, True))
    return tuple(launches)


def available() -> bool:
    """Whether CuPy imports and sees at least one CUDA device."""
    try:
        import cupy
    except ImportError:
        return False
    try:
        return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except cupy.cuda.runtime.CUDARuntimeError:
        return False


@dataclass(frozen=True)
class HostTables:
    """`gpu.ntt`'s tables for one size and field as host arrays of the field's storage dtype,
    in the layout the kernels read."""

    forward: npt.NDArray[Any]
    """Every stage's twiddles back to back: stage s (half-span m = 2^s) at [m − 1, 2m − 1)."""
    backward: npt.NDArray[Any]
    coset_up: npt.NDArray[Any]
    """GENERATOR^i, applied to coefficients before the forward transform."""
    coset_down: npt.NDArray[Any]
    """n⁻¹·GENERATOR^−i, applied after the inverse transform."""
    n_inverse: int
    z_inverse: int
    """1 / (GENERATOR^n − 1): Z's value on the whole coset, inverted."""


@functools.lru_cache(maxsize=_CACHED_SIZES)
def host_tables(log_n: int, field: PrimeField = BABYBEAR) -> HostTables:
    """The tables for 2^log_n points, from `gpu.ntt`'s cached uint64 tables."""
    _check_log_n(log_n, field)
    plan = _plan(log_n, field)
    up, down = _coset_scales(log_n, field.GENERATOR, field)

    def narrow(array: FieldArray) -> npt.NDArray[Any]:
        # Goldilocks tables are uint64 already: the cached arrays themselves (read-only), not
        # copies of their GiB.
        return array.astype(field.storage, copy=False)

    return HostTables(
        forward=narrow(np.concatenate(plan.forward)),
        backward=narrow(np.concatenate(plan.backward)),
        coset_up=narrow(up),
        coset_down=narrow(down),
        n_inverse=int(plan.n_inverse),
        z_inverse=field.inverse(HSteps(log_n, field).z_on_coset),
    )


def release_host_tables() -> None:
    """Drop the cached host tables (and `gpu.ntt`'s, which they come from) once every device
    has its copy: at 2^27 they hold ~7 GiB that nothing reads after the upload."""
    host_tables.cache_clear()
    _plan.cache_clear()
    _coset_scales.cache_clear()


@dataclass(frozen=True)
class _DeviceTables:
    forward: DeviceArray
    backward: DeviceArray
    coset_up: DeviceArray
    coset_down: DeviceArray


@functools.lru_cache(maxsize=_CACHED_SIZES)
def _device_tables(log_n: int, field: PrimeField, device_id: int) -> _DeviceTables:
    import cupy

    tables = host_tables(log_n, field)
    with cupy.cuda.Device(device_id):
        uploaded = _DeviceTables(
            *(
                cupy.asarray(t)
                for t in (tables.forward, tables.backward, tables.coset_up, tables.coset_down)
            )
        )
        # Uploaded on the current stream; callers launch on their own (maybe non-blocking)
        # streams, which do not wait for it.
        cupy.cuda.get_current_stream().synchronize()
    return uploaded


@functools.cache
def _kernels(device_id: int, field: PrimeField) -> dict[str, Any]:
    import cupy

    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(code=cuda_source(field), options=("--std=c++17",))
        return {name: module.get_function(name) for name in KERNEL_NAMES}


class CudaHSteps:
    """`gpu.ntt.HSteps` on a CUDA device: the same four phases, the same elements bit for bit.

    Device vectors are ``cupy.ndarray`` of n canonical elements in ``field.storage``. Every
    launch and copy
    goes on ``stream`` (the current stream at construction when None), on the device current at
    construction. Work buffers are allocated once here: each phase returns views of this
    instance's buffers, which its next call of the same phase overwrites, so copy a result to
    keep it. Nothing is checked on device: inputs must be canonical (`gpu.field.to_field`
    checks host arrays). ``CudaHSteps(16).run(*gpu.ntt.synthesize(1, 0, 16))`` equals
    ``gpu.ntt.compute_h`` of the same vectors.
    """

    def __init__(
        self, log_n: int, stream: cupy.cuda.Stream | None = None, field: PrimeField = BABYBEAR
    ) -> None:
        import cupy

        _check_log_n(log_n, field)
        self.field = field
        self._element = field.storage.type
        self.log_n = log_n
        self.n = 1 << log_n
        self._cupy = cupy
        self._device = cupy.cuda.Device()
        self.stream = stream if stream is not None else cupy.cuda.get_current_stream()
        tables = host_tables(log_n, field)
        self._n_inverse, self._z_inverse = tables.n_inverse, tables.z_inverse
        self._device_tables = _device_tables(log_n, field, self._device.id)
        self._kernels = _kernels(self._device.id, field)
        self._launches = launch_plan(log_n)
        with self._device:

            def buffer() -> DeviceArray:
                return cupy.empty(self.n, dtype=field.storage)

            self._inputs = (buffer(), buffer(), buffer())
            self._coeffs = (buffer(), buffer(), buffer())
            self._evals = (buffer(), buffer(), buffer())
            self._h_evals = buffer()
            self._h = buffer()
            self._lanes = min(self.n, DIGEST_LANES)
            self._lane_states = cupy.empty(self._lanes, dtype=cupy.uint64)
            # Waiting on a blocking event sleeps the thread; a stream synchronize spins a core
            # (CUDA's default with fewer contexts than cores) that synthesis could use.
            self._done = cupy.cuda.Event(block=True, disable_timing=True)
        self._host_staging = np.empty(self.n, dtype=field.storage)
        # Pinned, so the lanes' copy is asynchronous and `_wait` sleeps through the kernels
        # before it: into pageable memory, cudaMemcpyAsync itself waits for the stream, and
        # that wait spins a core for the whole partition.
        self._host_lanes = CudaHostAllocator().allocate(self._lanes * 8).view(np.uint64)

    def h2d(
        self, a: npt.ArrayLike, b: npt.ArrayLike, c: npt.ArrayLike
    ) -> tuple[DeviceArray, DeviceArray, DeviceArray]:
        """Copies host vectors a, b, c (length n, the field's storage dtype or uint64) to this
        instance's inputs.

        Arrays of the storage dtype in pinned memory copy asynchronously straight from their
        pages; others are narrowed on the host first (and the copy waits for it).
        """
        for name, values, target in zip("abc", (a, b, c), self._inputs, strict=True):
            host = self._host_vector(name, values)
            _memcpy(target.data.ptr, host.ctypes.data, host.nbytes, _HOST_TO_DEVICE, self.stream)
        return self._inputs

    def intt(
        self, a: DeviceArray, b: DeviceArray, c: DeviceArray
    ) -> tuple[DeviceArray, DeviceArray, DeviceArray]:
        """The coefficients of a, b, c (evaluations on <ω>)."""
        n_inverse = self._n_inverse
        for name, values, out in zip("abc", (a, b, c), self._coeffs, strict=True):
            self._transform(name, values, out, inverse=True, out_scalar=n_inverse)
        return self._coeffs

    def coset_ntt(
        self, a: DeviceArray, b: DeviceArray, c: DeviceArray
    ) -> tuple[DeviceArray, DeviceArray, DeviceArray]:
        """Evaluations of the three coefficient vectors on the coset GENERATOR·<ω>."""
        up = self._device_tables.coset_up
        for name, values, out in zip("abc", (a, b, c), self._evals, strict=True):
            self._transform(name, values, out, inverse=False, in_scale=up)
        return self._evals

    def pointwise(self, a: DeviceArray, b: DeviceArray, c: DeviceArray) -> DeviceArray:
        """H on the coset: (a·b − c) / Z, with Z = GENERATOR^n − 1 there."""
        for name, values in zip("abc", (a, b, c), strict=True):
            self._check_device(name, values)
        n = np.uint32(self.n)
        grid = -(-self.n // _BLOCK)
        args = (a, b, c, self._h_evals, self._element(self._z_inverse), n)
        with self._device, self.stream:
            self._kernels["h_pointwise"]((grid,), (_BLOCK,), args)
        return self._h_evals

    def coset_intt(self, h_evals: DeviceArray) -> DeviceArray:
        """H's n coefficients from its evaluations on the coset; the last one is 0."""
        down = self._device_tables.coset_down
        self._transform("h_evals", h_evals, self._h, inverse=True, out_vector=down)
        return self._h

    def d2h(self, h: DeviceArray, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """Copies device vector h to the host and waits for it.

        Into ``out`` when given (the storage dtype: copied straight in, at full speed when
        pinned; uint64: widened on the host), else into a new uint64 array like `gpu.ntt`'s.
        """
        self._check_device("h", h)
        if out is not None and (out.shape != (self.n,) or not out.flags.c_contiguous):
            raise ValueError(f"out must be a contiguous vector of length {self.n}, got {out.shape}")
        # The kernels first, asleep: a copy into pageable memory (the staging vector, maybe
        # ``out``) would wait for them spinning.
        self._wait()
        if out is not None and out.dtype == self.field.storage:
            _memcpy(out.ctypes.data, h.data.ptr, out.nbytes, _DEVICE_TO_HOST, self.stream)
            self._wait()
            return out
        staging = self._host_staging
        _memcpy(staging.ctypes.data, h.data.ptr, staging.nbytes, _DEVICE_TO_HOST, self.stream)
        self._wait()
        if out is None:
            return staging.astype(np.uint64)
        if out.dtype != np.uint64:
            raise ValueError(f"out must be {self.field.storage} or uint64, got {out.dtype}")
        out[...] = staging
        return out

    def digest(self, h: DeviceArray) -> str:
        """`gpu.ntt.digest` of device vector h: its lanes folded on the device, 8 bytes a lane
        copied back; waits for the copy."""
        self._check_device("h", h)
        lanes = self._lanes
        args = (h, self._lane_states, np.uint32(lanes), np.uint32(self.n // lanes))
        with self._device, self.stream:
            self._kernels["h_digest"]((-(-lanes // _BLOCK),), (_BLOCK,), args)
        host = self._host_lanes
        _memcpy(host.ctypes.data, self._lane_states.data.ptr, host.nbytes, _DEVICE_TO_HOST,
                self.stream)  # fmt: skip
        self._wait()
        return digest_of_lanes(self.n, host)

    def run(
        self,
        a: npt.ArrayLike,
        b: npt.ArrayLike,
        c: npt.ArrayLike,
        out: npt.NDArray[Any] | None = None,
    ) -> npt.NDArray[Any]:
        """All phases, host to host: the coefficients of H = (A·B − C) / Z, as `HSteps.run`."""
        coeffs = self.intt(*self.h2d(a, b, c))
        return self.d2h(self.coset_intt(self.pointwise(*self.coset_ntt(*coeffs))), out)

    def _wait(self) -> None:
        """Block (sleeping, not spinning) until everything queued on the stream is done."""
        self._done.record(self.stream)
        self._done.synchronize()

    def _transform(
        self,
        name: str,
        src: DeviceArray,
        dst: DeviceArray,
        *,
        inverse: bool,
        in_scale: DeviceArray | None = None,
        out_scalar: int | None = None,
        out_vector: DeviceArray | None = None,
    ) -> None:
        self._check_device(name, src)
        if src.data.ptr == dst.data.ptr:
            raise ValueError(f"{name} must not be the buffer this phase writes; copy it first")
        tables = self._device_tables
        twiddles = tables.backward if inverse else tables.forward
        # Unused pointer arguments still need a valid array; the mode flags keep them unread.
        placeholder = tables.coset_up
        element = self._element
        if out_vector is not None:
            out_mode, out_vec, scalar = _OUT_VECTOR, out_vector, element(0)
        elif out_scalar is not None:
            out_mode, out_vec, scalar = _OUT_SCALAR, placeholder, element(out_scalar)
        else:
            out_mode, out_vec, scalar = _OUT_NONE, placeholder, element(0)
        log_n = np.int32(self.log_n)
        with self._device, self.stream:
            for launch in self._launches:
                mode = np.int32(out_mode if launch.last else _OUT_NONE)
                kernel = self._kernels[launch.kernel]
                if launch.kernel == "ntt_head":
                    in_mode = np.int32(in_scale is not None)
                    scale = in_scale if in_scale is not None else placeholder
                    head_bits = np.int32(launch.log_tile)
                    head = (src, dst, twiddles, scale, in_mode, out_vec, scalar, mode)
                    kernel((launch.grid,), (launch.block,), (*head, log_n, head_bits))
                else:
                    span = self.n >> (2 if launch.kernel == "ntt_stage2" else 1)
                    args = (dst, twiddles, out_vec, scalar, mode, np.uint32(span))
                    kernel((launch.grid,), (launch.block,), (*args, np.int32(launch.stage)))

    def _host_vector(self, name: str, values: npt.ArrayLike) -> npt.NDArray[Any]:
        array = np.asarray(values)
        if array.shape != (self.n,):
            raise ValueError(f"{name} must be a vector of length n = {self.n}, got {array.shape}")
        storage = self.field.storage
        if array.dtype not in (storage, np.uint64):
            raise ValueError(
                f"{name} must hold {storage} or uint64 elements ({self.field.name}), "
                f"got {array.dtype}"
            )
        return np.ascontiguousarray(array, dtype=storage)

    def _check_device(self, name: str, values: DeviceArray) -> None:
        if not isinstance(values, self._cupy.ndarray):
            raise TypeError(f"{name} must be a cupy.ndarray, got {type(values).__name__}")
        if values.dtype != self.field.storage or values.shape != (self.n,):
            raise ValueError(
                f"{name} must be a {self.field.storage} vector of length n = {self.n}, "
                f"got {values.dtype} {values.shape}"
            )
        if not values.flags.c_contiguous:
            raise ValueError(f"{name} must be contiguous")
        if values.device.id != self._device.id:
            raise ValueError(f"{name} must be on device {self._device.id}, got {values.device.id}")


def to_device(values: Sequence[FieldArray] | FieldArray, field: PrimeField = BABYBEAR) -> Any:
    """Host uint64 vector(s) as device arrays of ``field.storage``, for calling one phase on
    its own. The copies have landed when it returns: they run on the current stream, and a
    kernel on a non-blocking stream would not wait for them (from pageable memory the call
    returns once the data is staged, before it reaches the device)."""
    import cupy

    if isinstance(values, np.ndarray):
        result = cupy.asarray(values.astype(field.storage))
    else:
        result = tuple(cupy.asarray(np.asarray(v).astype(field.storage)) for v in values)
    cupy.cuda.get_current_stream().synchronize()
    return result


def _memcpy(dst: int, src: int, nbytes: int, kind: int, stream: Any) -> None:
    import cupy

    cupy.cuda.runtime.memcpyAsync(dst, src, nbytes, kind, stream.ptr)


def _check_log_n(log_n: int, field: PrimeField | None = None) -> None:
    high = MAX_LOG_N if field is None else min(MAX_LOG_N, field.TWO_ADICITY)
    if not 1 <= log_n <= high:
        raise ValueError(f"log_n must be between 1 and {high}, got {log_n}")
