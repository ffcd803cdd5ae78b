"""Where a pinned pool's slot memory comes from: one allocation per slot, at construction only.

Three allocators (`allocator_for` picks one by name): "cuda" page-locks with cudaHostAlloc,
"numpy" uses ordinary pageable memory with the same API (CI, machines without a GPU), and
"shared" / "shared-cuda" make each slot a shared-memory block (`gpu.shm.blocks`) that other
processes can map, page-locked with cudaHostRegister for "shared-cuda", and that the next
pacer can adopt (`gpu.shm.handover`).

>>> memory = allocator_for("numpy").allocate(1000)
>>> memory.size, memory.ctypes.data % ALIGNMENT_BYTES
(1000, 0)
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from gpu.cuda.devices import device_count
from gpu.shm import blocks as shm_blocks
from gpu.shm.blocks import HostBlock
from gpu.shm.handover import Handover
from gpu.shm.record import PoolLayout

__all__ = [
    "ALIGNMENT_BYTES",
    "Backend",
    "ByteArray",
    "CudaHostAllocator",
    "HostAllocator",
    "NumpyHostAllocator",
    "PinSeconds",
    "PrivateHostAllocator",
    "SharedHostAllocator",
    "allocator_for",
    "pool_allocator",
    "populate",
]

ALIGNMENT_BYTES = 256
"""Each array of a slot starts at a multiple of this offset (CUDA's copy-friendly alignment)."""

Backend = Literal["auto", "cuda", "numpy", "shared", "shared-cuda"]
ByteArray = npt.NDArray[np.uint8]

_HOST_REGISTER_PORTABLE = 1  # cudaHostRegisterPortable: pinned for every CUDA context
MADV_POPULATE_READ, MADV_POPULATE_WRITE = 22, 23  # Linux 5.14
PIN_THREADS = max(1, min(8, os.cpu_count() or 1))
"""Threads that pin a shared pool's blocks side by side."""
PROGRESS_EVERY_S = 5.0
"""While a large pool is being pinned, a progress line this often."""

logger = logging.getLogger("gpu.pool.allocators")


def _libc_madvise() -> Callable[..., int] | None:
    try:
        function: Callable[..., int] = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    return function


_madvise = _libc_madvise()


class HostAllocator(Protocol):
    """Where a pool's slot memory comes from: `reserve` once, then one `allocate` per slot, at
    construction only; `release` at close."""

    @property
    def name(self) -> str:
        """What the logs call it: "cuda", "numpy", "shared" or "shared-cuda"."""
        ...

    @property
    def pinned(self) -> bool:
        """Whether the memory it returns is page-locked."""
        ...

    @property
    def slots_adopted(self) -> int:
        """Slots whose memory a previous pacer left (`gpu.shm.handover`), not allocated anew."""
        ...

    @property
    def blocks(self) -> Sequence[HostBlock]:
        """The shared-memory block of each slot, in slot order; empty unless shared."""
        ...

    def reserve(self, layout: PoolLayout, slots: int) -> None:
        """Before the first `allocate`: refuse a pool that cannot fit, and get ready ``slots``
        slots laid out as ``layout`` (a shared allocator adopts and pins them all here)."""
        ...

    def allocate(self, nbytes: int) -> ByteArray:
        """``nbytes`` bytes of writable host memory as a uint8 array that keeps it alive."""
        ...

    def release(self, keep: bool = False) -> bool:
        """Let go of what it holds beyond the arrays; with ``keep``, leave it for the next
        pacer where it can (shared blocks). Whether it was kept."""
        ...


class PrivateHostAllocator:
    """What an allocator of this process's own memory does beyond `allocate`: nothing to
    reserve or adopt, nothing shared, nothing it could keep."""

    slots_adopted = 0
    blocks: Sequence[HostBlock] = ()

    def reserve(self, layout: PoolLayout, slots: int) -> None:
        return None

    def release(self, keep: bool = False) -> bool:
        return False


class CudaHostAllocator(PrivateHostAllocator):
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


class NumpyHostAllocator(PrivateHostAllocator):
    """Ordinary (pageable) NumPy memory: the same pool on CI and machines without a GPU."""

    name = "numpy"
    pinned = False

    def allocate(self, nbytes: int) -> ByteArray:
        # Aligned like cudaHostAlloc's page-aligned memory, so layouts match across backends.
        raw = np.empty(nbytes + ALIGNMENT_BYTES, np.uint8)
        start = -raw.ctypes.data % ALIGNMENT_BYTES
        return raw[start : start + nbytes]


class SharedHostAllocator:
    """Shared-memory blocks, one per slot, that other processes can map (`gpu.shm.blocks`).

    With ``register`` each block is page-locked with cudaHostRegister (portable to every
    device), so GPU copies from it run at the pinned rate like cudaHostAlloc memory.
    ``handover`` (`gpu.shm.handover.Handover`) says where the blocks live (its ``directory``), and
    what happens to blocks a previous pacer left and to these at the end: `reserve` adopts
    the compatible ones, makes the rest, and (with ``register``, or ``populate``) has
    ``threads`` threads fill in their page tables (`populate`) and register them side by side
    (the time each part took: ``pin_seconds``); `release` unregisters them and removes them,
    or keeps them. Without ``register`` or ``populate`` a block's pages come as they are first
    written. With ``register`` CuPy is imported on a thread of its own while those fill the
    first blocks: its import (a second or so on a GPU host) overlaps the filling instead of
    coming before it or taking a filling thread (a thread waits for it once its first block is
    filled, to register it).
    """

    pinned: bool

    def __init__(
        self,
        register: bool,
        handover: Handover | None = None,
        threads: int | None = None,
        *,
        populate: bool | None = None,
    ) -> None:
        self.pinned = register
        self.name = "shared-cuda" if register else "shared"
        self.handover = handover or Handover()
        self.threads = max(1, PIN_THREADS if threads is None else threads)
        self.populate = register if populate is None else populate
        self.blocks: list[HostBlock] = []
        self.slots_adopted = 0
        self._arrays: list[ByteArray] = []
        self._registered: list[int] = []
        self.pin_seconds = PinSeconds()

    def reserve(self, layout: PoolLayout, slots: int) -> None:
        adopted = self.handover.claim(layout, slots)
        fresh = slots - len(adopted)
        try:
            if fresh and not self.handover.memfd:
                shm_blocks.check_room(fresh * layout.slot_bytes, self.handover.directory)
            made = [self._new_block(layout.slot_bytes) for _ in range(fresh)]
        except BaseException:
            self.handover.release(adopted)
            raise
        self.blocks = adopted + made
        self.slots_adopted = len(adopted)
        try:
            self._arrays = self._pin_all()
        except BaseException:
            self.release()
            raise
        self.handover.begin(self.blocks)

    def _new_block(self, nbytes: int) -> HostBlock:
        return shm_blocks.create_block(
            nbytes,
            memfd=self.handover.memfd,
            tracked=not self.handover.keep,
            directory=self.handover.directory,
        )

    def _pin_all(self) -> list[ByteArray]:
        """Every block mapped as an array, page tables filled and registered, on ``threads``
        threads (the kernel and the driver take each block's pages in parallel), with a
        progress line every PROGRESS_EVERY_S."""
        start = last_report = time.monotonic()
        importing = ThreadPoolExecutor(1, thread_name_prefix="pin-cupy")
        with importing, ThreadPoolExecutor(self.threads, thread_name_prefix="pin") as pinning:
            cuda = importing.submit(_cupy_cuda) if self.pinned else None
            tasks = [
                pinning.submit(self._pin, index, block, cuda)
                for index, block in enumerate(self.blocks)
            ]
            while True:
                done, waiting = futures.wait(tasks, PROGRESS_EVERY_S)
                if not waiting:
                    break
                if time.monotonic() - last_report >= PROGRESS_EVERY_S:
                    last_report = time.monotonic()
                    logger.info("pinning host memory: %d of %d slots after %.0f s",
                                len(done), len(tasks), last_report - start)  # fmt: skip
            arrays = [task.result() for task in tasks]
        if self.blocks:
            logger.info("pinning %d blocks on %d threads took %s", len(self.blocks),
                        self.threads, self.pin_seconds.words(self.blocks[0].size))  # fmt: skip
        return arrays

    def _pin(self, index: int, block: HostBlock, cuda: futures.Future[Any] | None) -> ByteArray:
        array = np.frombuffer(block.mapping, np.uint8, block.size)
        spent = self.pin_seconds
        if self.populate:  # else the pages come as they are first written, as ever
            with spent.counting("populate"):
                populate(array.ctypes.data, block.size, existing=index < self.slots_adopted)
        if cuda is not None:  # CuPy's import, or why it failed
            with spent.counting("cuda"):
                runtime = cuda.result().runtime
            with spent.counting("register"):
                runtime.hostRegister(array.ctypes.data, block.size, _HOST_REGISTER_PORTABLE)
            self._registered.append(array.ctypes.data)  # list.append is atomic
        return array

    def allocate(self, nbytes: int) -> ByteArray:
        if not self._arrays:
            raise RuntimeError("every reserved slot is allocated: reserve them first")
        array = self._arrays.pop(0)
        if array.size != nbytes:
            raise ValueError(f"reserved slots hold {array.size} bytes, {nbytes} asked for")
        return array

    def release(self, keep: bool = False) -> bool:
        """Unpin every block, then keep it for the next pacer or remove it; mappings still held
        elsewhere stay valid until dropped."""
        for pointer in self._registered:
            _cupy_cuda().runtime.hostUnregister(pointer)
        self._registered.clear()
        self._arrays.clear()
        blocks, self.blocks = self.blocks, []
        if keep:
            self.handover.keep_blocks(blocks)
        else:
            self.handover.release(blocks)
        return keep


class PinSeconds:
    """Seconds the pinning threads spent, summed over them, in each part of pinning a block:
    filling in page tables (``populate``), waiting for CUDA (``cuda``: CuPy's import, once),
    page-locking (``register``); and the blocks each part took.

    >>> spent = PinSeconds()
    >>> with spent.counting("populate"):
    ...     pass
    >>> spent.blocks["populate"], spent.seconds["populate"] < 1
    (1, True)
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.blocks: dict[str, int] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def counting(self, part: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - began
            with self._lock:
                self.seconds[part] = self.seconds.get(part, 0.0) + spent
                self.blocks[part] = self.blocks.get(part, 0) + 1

    def words(self, block_bytes: int) -> str:
        """Each part's thread-seconds and, for the pages, its rate a thread."""
        said = []
        for part, seconds in self.seconds.items():
            rate = ""
            if part != "cuda" and seconds > 0:
                rate = f" ({self.blocks[part] * block_bytes / seconds / 2**30:.1f} GiB/s a thread)"
            said.append(f"{part} {seconds:.1f} thread-s{rate}")
        return ", ".join(said) or "nothing"


def populate(address: int, nbytes: int, existing: bool = False) -> bool:
    """Fill in this process's page tables for ``nbytes`` of a shared mapping at ``address``,
    without holding the GIL: as writes would (allocating the pages), or for ``existing`` pages
    (an adopted block) as reads would, which maps them writable 16 at a time. False where the
    kernel cannot (before Linux 5.14: the pages then fault in on first use)."""
    if _madvise is None:
        return False
    advice = MADV_POPULATE_READ if existing else MADV_POPULATE_WRITE
    return int(_madvise(ctypes.c_void_p(address), ctypes.c_size_t(nbytes), advice)) == 0


def pool_allocator(
    backend: Literal["cuda", "shared", "shared-cuda"],
    keep: bool,
    slots: int,
    *,
    populate: bool | None = None,
    shm_dir: str = shm_blocks.SHM_DIR,
) -> HostAllocator | Literal["cuda"]:
    """A service's pool allocator: shared blocks in ``shm_dir`` (a tmpfs) handed to and from
    other pacers of this host (`gpu.shm.handover.Handover.for_service`), or "cuda" (cudaHostAlloc
    memory, never kept)."""
    if backend == "cuda":
        return "cuda"
    handover = Handover.for_service(keep, slots, shm_dir)
    return SharedHostAllocator(backend == "shared-cuda", handover, populate=populate)


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
