"""The Groth16 H computation of `gpu.reference.ntt` on a CUDA device, through CuPy.

`CudaHSteps` mirrors `gpu.reference.ntt.HSteps` phase by phase, and gives the same elements bit
for bit. The kernels (`gpu.cuda.kernels`) do exact arithmetic mod p. The tables come from the
same roots and shifts (`gpu.cuda.tables`). Device vectors hold canonical elements in the field's
storage type: uint32 for BabyBear, uint64 for Goldilocks.

This module imports without CuPy; `gpu.cuda.devices.device_count` says whether a device is there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gpu.cuda.kernels import (
    BLOCK,
    OUT_NONE,
    OUT_SCALAR,
    OUT_VECTOR,
    check_log_n,
    launch_plan,
)
from gpu.cuda.tables import compiled_kernels, device_tables, h_scalars
from gpu.field.babybear import BABYBEAR
from gpu.field.prime import FieldArray, PrimeField
from gpu.pool.allocators import CudaHostAllocator
from gpu.reference.digest import DIGEST_LANES, digest_of_lanes
from gpu.reference.ntt import H_PHASES

if TYPE_CHECKING:
    import cupy

__all__ = ["GPU_PHASES", "CudaHSteps", "to_device"]

GPU_PHASES = ("h2d", *H_PHASES, "d2h")
"""The phases of `CudaHSteps.run` (the H computation between the copies), in order, as a proof
and a bench time them."""

_HOST_TO_DEVICE, _DEVICE_TO_HOST = 1, 2  # cudaMemcpyKind

DeviceArray = Any
"""A ``cupy.ndarray`` of n canonical elements in the field's storage dtype (typed Any: CuPy
ships no stubs)."""


class CudaHSteps:
    """`gpu.reference.ntt.HSteps` on a CUDA device: the same four phases, the same elements.

    Device vectors are ``cupy.ndarray`` of n canonical elements in ``field.storage``. Every launch
    and copy goes on ``stream`` (the current one if None), on the device current at construction.
    Each phase returns views of this instance's buffers, which the next call overwrites: copy a
    result to keep it. Inputs must be canonical; nothing is checked on the device.
    """

    def __init__(
        self, log_n: int, stream: cupy.cuda.Stream | None = None, field: PrimeField = BABYBEAR
    ) -> None:
        import cupy

        check_log_n(log_n, field)
        self.field = field
        self._element = field.storage.type
        self.log_n = log_n
        self.n = 1 << log_n
        self._cupy = cupy
        self._device = cupy.cuda.Device()
        self.stream = stream if stream is not None else cupy.cuda.get_current_stream()
        self._n_inverse, self._z_inverse = h_scalars(log_n, field)
        self._device_tables = device_tables(log_n, field, self._device.id)
        self._kernels = compiled_kernels(self._device.id, field)
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
        """Copy host vectors a, b, c (the storage dtype or uint64) to this instance's inputs.

        Pinned arrays of the storage dtype copy asynchronously. Others are narrowed on the host
        first.
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
        grid = -(-self.n // BLOCK)
        args = (a, b, c, self._h_evals, self._element(self._z_inverse), n)
        with self._device, self.stream:
            self._kernels["h_pointwise"]((grid,), (BLOCK,), args)
        return self._h_evals

    def coset_intt(self, h_evals: DeviceArray) -> DeviceArray:
        """H's n coefficients from its evaluations on the coset; the last one is 0."""
        down = self._device_tables.coset_down
        self._transform("h_evals", h_evals, self._h, inverse=True, out_vector=down)
        return self._h

    def d2h(self, h: DeviceArray, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """Copy device vector h to the host and wait for it.

        Copies into ``out`` if given (storage dtype or uint64), else into a new uint64 array.
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
        """`gpu.reference.digest.digest` of device vector h, folded on the device."""
        self._check_device("h", h)
        lanes = self._lanes
        args = (h, self._lane_states, np.uint32(lanes), np.uint32(self.n // lanes))
        with self._device, self.stream:
            self._kernels["h_digest"]((-(-lanes // BLOCK),), (BLOCK,), args)
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
            out_mode, out_vec, scalar = OUT_VECTOR, out_vector, element(0)
        elif out_scalar is not None:
            out_mode, out_vec, scalar = OUT_SCALAR, placeholder, element(out_scalar)
        else:
            out_mode, out_vec, scalar = OUT_NONE, placeholder, element(0)
        log_n = np.int32(self.log_n)
        with self._device, self.stream:
            for launch in self._launches:
                mode = np.int32(out_mode if launch.last else OUT_NONE)
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
    """Copy host uint64 vectors to device arrays of ``field.storage``, to call one phase alone.

    The copies have landed when it returns, so a kernel on a non-blocking stream sees them.
    """
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
