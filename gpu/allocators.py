"""Where a pinned pool's slot memory comes from: one allocation per slot, at construction only.

Three allocators (`allocator_for` picks one by name): "cuda" page-locks with cudaHostAlloc,
"numpy" uses ordinary pageable memory with the same API (CI, machines without a GPU), and
"shared" / "shared-cuda" make each slot a named shared-memory block (`gpu.shm_blocks`) that
other processes can map, page-locked with cudaHostRegister for "shared-cuda".

>>> memory = allocator_for("numpy").allocate(1000)
>>> memory.size, memory.ctypes.data % ALIGNMENT_BYTES
(1000, 0)
"""

from __future__ import annotations

from multiprocessing import shared_memory
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from gpu import shm_blocks
from gpu.devices import device_count

__all__ = [
    "ALIGNMENT_BYTES",
    "Backend",
    "ByteArray",
    "CudaHostAllocator",
    "HostAllocator",
    "NumpyHostAllocator",
    "SharedHostAllocator",
    "allocator_for",
]

ALIGNMENT_BYTES = 256
"""Each array of a slot starts at a multiple of this offset (CUDA's copy-friendly alignment)."""

Backend = Literal["auto", "cuda", "numpy", "shared", "shared-cuda"]
ByteArray = npt.NDArray[np.uint8]

_HOST_REGISTER_PORTABLE = 1  # cudaHostRegisterPortable: pinned for every CUDA context


class HostAllocator(Protocol):
    """Where a pool's slot memory comes from: one call per slot, at construction only."""

    @property
    def name(self) -> str:
        """What the logs call it: "cuda" or "numpy"."""
        ...

    @property
    def pinned(self) -> bool:
        """Whether the memory it returns is page-locked."""
        ...

    def allocate(self, nbytes: int) -> ByteArray:
        """``nbytes`` bytes of writable host memory as a uint8 array that keeps it alive."""
        ...


class CudaHostAllocator:
    """Page-locked memory from cudaHostAlloc, through CuPy (imported here, not at module load).

    Each call makes one `cupy.cuda.PinnedMemory`, which frees itself (cudaFreeHost) when the last
    reference to it goes. CuPy's `alloc_pinned_memory` is not used: it serves from CuPy's
    caching pinned pool, which keeps freed blocks instead of handing them back to the OS.
    """

    name = "cuda"
    pinned = True

    def __init__(self) -> None:
        self._cuda: Any = _cupy_cuda()

    def allocate(self, nbytes: int) -> ByteArray:
        memory = self._cuda.PinnedMemory(nbytes)
        # The pointer exports the buffer protocol and holds `memory`; the array holds the pointer.
        pointer = self._cuda.PinnedMemoryPointer(memory, 0)
        return np.frombuffer(pointer, np.uint8, nbytes)


class NumpyHostAllocator:
    """Ordinary (pageable) NumPy memory: the same pool on CI and machines without a GPU."""

    name = "numpy"
    pinned = False

    def allocate(self, nbytes: int) -> ByteArray:
        # Aligned like cudaHostAlloc's page-aligned memory, so layouts match across backends.
        raw = np.empty(nbytes + ALIGNMENT_BYTES, np.uint8)
        start = -raw.ctypes.data % ALIGNMENT_BYTES
        return raw[start : start + nbytes]


class SharedHostAllocator:
    """Named POSIX shared-memory blocks, one per slot, that other processes can map by name.

    With ``register`` each block is page-locked with cudaHostRegister (portable to every
    device), so GPU copies from it run at the pinned rate like cudaHostAlloc memory. `release`
    unregisters and unlinks every block (the pool calls it on close).
    """

    pinned: bool

    def __init__(self, register: bool) -> None:
        self.pinned = register
        self.name = "shared-cuda" if register else "shared"
        self._cuda: Any = None
        if register:
            self._cuda = _cupy_cuda()
        self.blocks: list[shared_memory.SharedMemory] = []
        self._registered: list[int] = []

    def check_room(self, total_bytes: int) -> None:
        """Refuse a pool that does not fit in /dev/shm now (`gpu.shm_blocks.check_room`)."""
        shm_blocks.check_room(total_bytes)

    def allocate(self, nbytes: int) -> ByteArray:
        block = shm_blocks.create_block(nbytes)
        self.blocks.append(block)
        assert block.buf is not None
        array = np.frombuffer(block.buf, np.uint8, nbytes)
        if self._cuda is not None:
            self._cuda.runtime.hostRegister(array.ctypes.data, nbytes, _HOST_REGISTER_PORTABLE)
            self._registered.append(array.ctypes.data)
        return array

    def release(self) -> None:
        """Unpin and unlink every block; mappings still held elsewhere stay valid until dropped."""
        for pointer in self._registered:
            self._cuda.runtime.hostUnregister(pointer)
        self._registered.clear()
        for block in self.blocks:
            shm_blocks.unlink_block(block)
        self.blocks.clear()


def allocator_for(backend: Backend | HostAllocator) -> HostAllocator:
    """The allocator ``backend`` names ("auto": cuda where CuPy sees a device, else numpy), or
    ``backend`` itself when it is one."""
    if not isinstance(backend, str):
        return backend
    if backend == "auto":
        backend = "cuda" if device_count() > 0 else "numpy"
    if backend == "cuda":
        return CudaHostAllocator()
    if backend == "numpy":
        return NumpyHostAllocator()
    if backend in ("shared", "shared-cuda"):
        return SharedHostAllocator(register=backend == "shared-cuda")
    raise ValueError(
        f"backend must be 'auto', 'cuda', 'numpy', 'shared' or 'shared-cuda', got {backend!r}"
    )


def _cupy_cuda() -> Any:
    """``cupy.cuda``, imported here; a clear error where CuPy is missing."""
    try:
        import cupy
    except ImportError as error:
        raise RuntimeError(
            "backend 'cuda' needs CuPy (pip install 'pacer[gpu]'); "
            "use backend 'numpy' or 'auto' on machines without a GPU"
        ) from error
    return cupy.cuda
