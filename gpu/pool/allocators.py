"""Where a pinned pool's slot memory comes from: one allocation per slot, made at construction.

`allocator_for` picks an allocator by name:

- "cuda" page-locks memory with cudaHostAlloc.
- "numpy" uses ordinary pageable memory with the same API, for CI and hosts without a GPU.
- "shared" makes each slot a shared-memory block (`gpu.shm.blocks`) that other processes map
  and the next pacer can adopt (`gpu.shm.handover`).
- "shared-cuda" does the same and page-locks the blocks with cudaHostRegister.

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
    """Gives a pool its slot memory: `reserve` once, one `allocate` per slot, `release` at close."""

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
        """Prepare ``slots`` slots laid out as ``layout``; raise if the pool cannot fit.

        Call it once, before the first `allocate`. A shared allocator adopts and pins blocks here.
        """
        ...

    def allocate(self, nbytes: int) -> ByteArray:
        """``nbytes`` bytes of writable host memory as a uint8 array that keeps it alive."""
        ...

    def release(self, keep: bool = False) -> bool:
        """Let go of what it holds beyond the arrays, and return whether anything was kept.

        With ``keep``, shared blocks stay for the next pacer.
        """
        ...


class PrivateHostAllocator:
    """Base for allocators of this process's own memory: nothing to reserve, share or keep."""

    slots_adopted = 0
    blocks: Sequence[HostBlock] = ()

    def reserve(self, layout: PoolLayout, slots: int) -> None:
        return None

    def release(self, keep: bool = False) -> bool:
        return False


class CudaHostAllocator(PrivateHostAllocator):
    """Page-locked memory from cudaHostAlloc, through CuPy (imported on first use).

    Each call makes one `cupy.cuda.PinnedMemory`, which calls cudaFreeHost when its last reference
    goes. CuPy's caching pinned pool is not used (docs/decisions/gpu.md, D94).
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

    ``handover`` (`gpu.shm.handover.Handover`) names the blocks' directory. It also says what
    happens to blocks a previous pacer left, and to these at the end.

    `reserve` adopts the compatible blocks and makes the rest. With ``register``, each block is
    page-locked with cudaHostRegister for every device, so copies run at the pinned rate. With
    ``register`` or ``populate``, ``threads`` threads fill in the page tables first. Otherwise the
    pages come as they are first written. ``pin_seconds`` holds the time each part took.

    With ``register``, CuPy is imported on its own thread while the first blocks fill
    (docs/decisions/startup.md, D123). `release` unregisters the blocks, then removes or keeps them.
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
        """Map, populate and register every block on ``threads`` threads, logging progress."""
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
        """Unpin every block, then keep or remove it.

        Mappings held elsewhere stay valid until they are dropped.
        """
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
    """Thread-seconds spent in each part of pinning a block, and how many blocks each part took.

    The parts are "populate" (page tables), "cuda" (CuPy's import, once) and "register".

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
        """Each part's thread-seconds, and the per-thread page rate, as text."""
        said = []
        for part, seconds in self.seconds.items():
            rate = ""
            if part != "cuda" and seconds > 0:
                rate = f" ({self.blocks[part] * block_bytes / seconds / 2**30:.1f} GiB/s a thread)"
            said.append(f"{part} {seconds:.1f} thread-s{rate}")
        return ", ".join(said) or "nothing"


def populate(address: int, nbytes: int, existing: bool = False) -> bool:
    """Fill in page tables for ``nbytes`` of a shared mapping at ``address``, without the GIL.

    New pages are allocated as writes would. With ``existing`` (an adopted block), pages are mapped
    as reads would, then made writable. Returns False where the kernel cannot do this (before
    Linux 5.14); the pages then fault in on first use.
    """
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
    """A service's pool allocator: shared blocks in ``shm_dir``, or "cuda" memory.

    Shared blocks pass to and from other pacers on this host
    (`gpu.shm.handover.Handover.for_service`). "cuda" memory is never kept.
    """
    if backend == "cuda":
        return "cuda"
    handover = Handover.for_service(keep, slots, shm_dir)
    return SharedHostAllocator(backend == "shared-cuda", handover, populate=populate)


def allocator_for(backend: Backend | HostAllocator) -> HostAllocator:
    """The allocator ``backend`` names, or ``backend`` itself when it is an allocator.

    "auto" means cuda where CuPy sees a device, else numpy.
    """
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
    """Import and return ``cupy.cuda``; raise a clear error where CuPy is missing."""
    try:
        import cupy
    except ImportError as error:
        raise RuntimeError(
            "backend 'cuda' needs CuPy (pip install 'pacer[gpu]'); "
            "use backend 'numpy' or 'auto' on machines without a GPU"
        ) from error
    return cupy.cuda
