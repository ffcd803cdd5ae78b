"""The pinned host-memory pool: every page-locked buffer allocated once, before readiness.

Pinned memory makes host-to-device copies fast (about 54.5 GB/s against 5 GB/s from pageable
memory on an H200) but is slow and disruptive to get: cudaHostAlloc runs at about 2 GiB/s, and a
thread calling it in a loop slowed a 1.1 ms kernel loop 573-fold. So the pool allocates all its
slots when it is built (build it in a thread before the service reports ready) and only lends
them out afterwards; `allocations_after_warmup` counts any slot allocation made later, which
must stay 0.

A slot holds one partition's buffers (a, b, c), NumPy views into one allocation, which a
synthesis fills in place and a GPU worker copies to the device without staging. With the
"shared" backends each slot is a named shared-memory block (registered with cudaHostRegister
for "shared-cuda"), so synthesis in other processes can write it in place (`slot_block`).

>>> with PinnedPool(slots=2, slot_shapes=[(8,), (8,), (8,)], backend="numpy") as pool:
...     with pool.checkout() as slot:
...         a, b, c = slot.arrays
...         a[:] = 7
...         pool.in_use_bytes == pool.slot_bytes
...     pool.in_use_bytes, pool.checkouts, pool.allocations_after_warmup
True
(0, 1, 0)
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing import shared_memory
from types import TracebackType
from typing import Any, Literal, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "ALIGNMENT_BYTES",
    "CudaHostAllocator",
    "HostAllocator",
    "NumpyHostAllocator",
    "PinnedPool",
    "PoolClosedError",
    "PoolExhausted",
    "SharedHostAllocator",
    "Slot",
    "SlotBlock",
    "block_owner",
    "remove_stale_blocks",
]

logger = logging.getLogger("gpu.pool")

ALIGNMENT_BYTES = 256
"""Each array of a slot starts at a multiple of this offset (CUDA's copy-friendly alignment)."""

Backend = Literal["auto", "cuda", "numpy", "shared", "shared-cuda"]
OnEmpty = Literal["wait", "fallback"]
ByteArray = npt.NDArray[np.uint8]


PROGRESS_EVERY_S = 5.0
"""While a large pool is being pinned, a progress line this often."""


class PoolExhausted(Exception):  # noqa: N818 - the domain name STYLE.md uses
    """No slot came free within the checkout's timeout (policy ``on_empty="wait"``)."""

    def __init__(self, slots_total: int, slot_bytes: int, timeout_s: float) -> None:
        self.slots_total = slots_total
        self.slot_bytes = slot_bytes
        self.timeout_s = timeout_s
        super().__init__(
            f"no pinned slot came free within {timeout_s:g} s: all {slots_total} slots "
            f"({slots_total} × {_format_bytes(slot_bytes)}) are checked out"
        )


class PoolClosedError(RuntimeError):
    """The pool was closed; its memory is gone and it lends nothing more."""


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
        """Refuse a pool that does not fit in /dev/shm now, once blocks that a dead process
        left there are gone (`remove_stale_blocks`). Blocks are sparse until written, and a
        write past the tmpfs limit is a SIGBUS, so this is checked before any block."""
        remove_stale_blocks()
        stats = os.statvfs(SHM_DIR)
        room = stats.f_bavail * stats.f_frsize
        if total_bytes > room:
            raise RuntimeError(
                f"shared-memory pool slots need {_format_bytes(total_bytes)} in {SHM_DIR}, which "
                f"has {_format_bytes(room)} free; enlarge it (e.g. docker --shm-size, a "
                "Kubernetes emptyDir with medium Memory), lower the slot count, or synthesize on "
                "threads instead (PACER_SYNTHESIS__EXECUTOR=threads: pinned without /dev/shm, "
                "synthesis slower)"
            )

    def allocate(self, nbytes: int) -> ByteArray:
        name = f"{BLOCK_PREFIX}{os.getpid()}-{next(_block_numbers)}"
        block = shared_memory.SharedMemory(name=name, create=True, size=nbytes)
        _live_blocks.add(name)
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
            try:
                block.close()
            except BufferError:
                # A slot still checked out: its arrays keep the mapping until they are dropped.
                # The block object lets go of it, or its __del__ would retry the close and
                # print this error again.
                block._buf = block._mmap = None  # type: ignore[attr-defined]
            block.unlink()
            _live_blocks.discard(block.name)
        self.blocks.clear()


BLOCK_PREFIX = "pacer-pool-"
"""Names of shared slot blocks in /dev/shm: ``pacer-pool-<pid>-<n>``, so a later start can
tell whose they are."""
_block_numbers = itertools.count()
_live_blocks: set[str] = set()  # names this process created and has not unlinked


def remove_stale_blocks(directory: str | None = None) -> tuple[int, int]:
    """Unlink the slot blocks of processes that are gone; returns (blocks, bytes) removed.

    A service killed outright (SIGKILL, the OOM killer) never unlinks its blocks, and tmpfs
    keeps them, GiB each, until someone does. A block is stale when the process in its name
    has exited, or is this one (a restarted container's PID 1) but did not make it. Blocks of
    a live process (another service on this host) are left alone.
    """
    directory = directory or SHM_DIR
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0, 0
    removed: dict[int, list[int]] = {}  # pid: sizes of its blocks removed
    for name in sorted(names):
        pid = block_owner(name)
        if pid is None:
            continue
        mine = pid == os.getpid()
        if (mine and name in _live_blocks) or (not mine and _process_alive(pid)):
            continue
        path = os.path.join(directory, name)
        try:
            size = os.stat(path).st_blocks * 512  # what it holds, not its sparse length
            os.unlink(path)
        except FileNotFoundError:
            continue  # removed meanwhile
        except OSError as error:  # another user's (a run as root?): say so, go on
            logger.warning("cannot remove stale shared slot block %s: %s", path, error)
            continue
        removed.setdefault(pid, []).append(size)
    for pid, sizes in removed.items():
        logger.warning(
            "removed %d shared slot blocks (%s) from %s that process %d left when it died",
            len(sizes), _format_bytes(sum(sizes)), directory, pid,
        )  # fmt: skip
    return sum(map(len, removed.values())), sum(map(sum, removed.values()))


def block_owner(name: str) -> int | None:
    """The PID of the process that made slot block ``name``; None for a name not of that form.

    >>> block_owner("pacer-pool-4242-7"), block_owner("pacer-pool-x-7"), block_owner("other")
    (4242, None, None)
    """
    pid_text, _, number = name.removeprefix(BLOCK_PREFIX).partition("-")
    if not name.startswith(BLOCK_PREFIX) or not (pid_text.isdigit() and number.isdigit()):
        return None
    return int(pid_text)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


_HOST_REGISTER_PORTABLE = 1  # cudaHostRegisterPortable: pinned for every CUDA context
SHM_DIR = "/dev/shm"


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


def cuda_available() -> bool:
    """Whether CuPy imports and sees at least one CUDA device."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:  # ImportError, or CUDARuntimeError where there is no driver or device
        return False


class Slot:
    """One checked-out partition's buffers; give it back with `release` or a ``with`` block.

    ``arrays`` are views the holder writes in place; they must not be used after release (the
    next holder gets the same memory). ``index`` is the pool slot, None for a pageable
    fallback; ``pinned`` is False for a fallback and for the NumPy backend.
    """

    __slots__ = ("_arrays", "_pool", "index", "nbytes", "pinned")

    def __init__(
        self,
        pool: PinnedPool,
        index: int | None,
        arrays: tuple[npt.NDArray[Any], ...],
        nbytes: int,
        pinned: bool,
    ) -> None:
        self._pool = pool
        self._arrays: tuple[npt.NDArray[Any], ...] | None = arrays
        self.index = index
        self.nbytes = nbytes
        self.pinned = pinned

    @property
    def arrays(self) -> tuple[npt.NDArray[Any], ...]:
        """The buffers, one per shape the pool was built with."""
        if self._arrays is None:
            raise RuntimeError(f"{self!r} was released; check out another slot")
        return self._arrays

    @property
    def released(self) -> bool:
        return self._arrays is None

    def release(self) -> None:
        """Give the slot back to its pool (the same as ``pool.release(slot)``)."""
        self._pool.release(self)

    def __enter__(self) -> Slot:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.released:
            self.release()

    def __repr__(self) -> str:
        where = "pageable fallback" if self.index is None else f"slot {self.index}"
        return f"<Slot {where}, {_format_bytes(self.nbytes)}>"


class SlotBlock(NamedTuple):
    """Where a slot lives, for a process that maps it: `SlotBlock.arrays` gives its buffers."""

    name: str  # the shared-memory block
    offsets: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtype: str

    def arrays(self, buffer: Any) -> tuple[npt.NDArray[Any], ...]:
        """Views of the slot's buffers in ``buffer`` (the mapped block)."""
        dtype = np.dtype(self.dtype)
        return tuple(
            np.frombuffer(buffer, dtype, math.prod(shape), offset).reshape(shape)
            for shape, offset in zip(self.shapes, self.offsets, strict=True)
        )


class PinnedPool:
    """A fixed set of slots of pinned host memory, allocated at construction, lent thread-safely.

    Each of ``slots`` slots holds one array per shape in ``slot_shapes`` (e.g. three vectors of n
    elements for a partition's a, b, c), all of ``dtype``, in one allocation. ``backend``:
    "cuda" pins with cudaHostAlloc through CuPy, "numpy" uses ordinary memory with the same API,
    "auto" picks cuda where CuPy sees a device; a `HostAllocator` may be given instead.

    "shared" and "shared-cuda" make each slot a named shared-memory block (see
    `SharedHostAllocator`) that `slot_block` describes to other processes. When every slot is
    out, ``on_empty`` decides: "wait" blocks `checkout` until a release (or
    its timeout, raising `PoolExhausted`), counted in `waits`; "fallback" lends freshly allocated
    pageable memory, counted in `fallbacks`, dropped on release. With ``budget_bytes`` the
    pool refuses to be built larger than that. ``clock`` (seconds) times allocation, waits
    and freeing.

    Building takes about total_bytes / (2 GiB/s) on the cuda backend: do it in a thread before
    the service reports ready. The counters are plain ints, read without the lock.
    """

    def __init__(
        self,
        slots: int,
        slot_shapes: Sequence[tuple[int, ...]],
        dtype: npt.DTypeLike = np.uint64,
        backend: Backend | HostAllocator = "auto",
        on_empty: OnEmpty = "wait",
        *,
        budget_bytes: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        if on_empty not in ("wait", "fallback"):
            raise ValueError(f"on_empty must be 'wait' or 'fallback', got {on_empty!r}")
        self.dtype = np.dtype(dtype)
        self.slot_shapes = tuple(tuple(int(d) for d in shape) for shape in slot_shapes)
        self.slot_bytes, self._offsets = _layout(self.slot_shapes, self.dtype)
        self.slots_total = slots
        self.total_bytes = slots * self.slot_bytes
        if budget_bytes is not None and self.total_bytes > budget_bytes:
            raise ValueError(
                f"pinned pool of {slots} slots × {_format_bytes(self.slot_bytes)} = "
                f"{_format_bytes(self.total_bytes)} does not fit the memory budget of "
                f"{_format_bytes(budget_bytes)} (PACER_MEMORY__BUDGET_BYTES); "
                "lower the slot count or raise the budget"
            )
        self.on_empty: OnEmpty = on_empty
        self._clock = clock
        self._allocator = _allocator_for(backend)
        self.backend = self._allocator.name
        self.pinned = self._allocator.pinned

        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self._memory: list[ByteArray] = []
        self._arrays: list[tuple[npt.NDArray[Any], ...]] = []
        self._free: list[int] = []
        self._closed = False
        self._warm = False

        self.in_use_bytes = 0
        self.checkouts = 0
        self.waits = 0
        self.waited_s = 0.0
        self.fallbacks = 0
        self.allocations = 0
        self.allocations_after_warmup = 0
        self.freed_in_s: float | None = None

        check_room = getattr(self._allocator, "check_room", None)
        if check_room is not None:
            check_room(self.total_bytes)
        start = last_report = clock()
        for index in range(slots):
            if clock() - last_report >= PROGRESS_EVERY_S:
                last_report = clock()
                logger.info("pinning host memory: %d of %d slots after %.0f s",
                            index, slots, last_report - start)  # fmt: skip
            try:
                self._add_slot()
            except BaseException:
                self._memory.clear()
                self._arrays.clear()
                self._release_allocator()
                logger.error(
                    "allocating %s slot %d of %d (%s each) failed after %.1f s",
                    self.backend, index + 1, slots, _format_bytes(self.slot_bytes),
                    clock() - start,
                )  # fmt: skip
                raise
        self.allocated_in_s = clock() - start
        self._free = list(range(slots - 1, -1, -1))  # popped from the end: slot 0 goes first
        self._warm = True
        logger.info(
            "%s pool of %d slots × %s = %s allocated in %.1f s (%s)",
            "pinned" if self.pinned else "pageable (numpy)", slots,
            _format_bytes(self.slot_bytes), _format_bytes(self.total_bytes),
            self.allocated_in_s, _format_rate(self.total_bytes, self.allocated_in_s),
        )  # fmt: skip

    # Accounting -------------------------------------------------------------------------------

    @property
    def free_bytes(self) -> int:
        """Bytes of pool memory not checked out (fallback memory is not pool memory)."""
        return self.total_bytes - self.in_use_bytes

    @property
    def slots_free(self) -> int:
        return len(self._free)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def block_names(self) -> tuple[str, ...]:
        """The slots' shared-memory blocks, in slot order; empty unless the backend is shared."""
        blocks = getattr(self._allocator, "blocks", None)
        return () if blocks is None else tuple(block.name for block in blocks)

    def slot_block(self, slot: Slot) -> SlotBlock | None:
        """Where ``slot`` lives, for another process to write it; None unless the backend is a
        shared one and the slot is a pool slot (not a pageable fallback)."""
        blocks = getattr(self._allocator, "blocks", None)
        if blocks is None or slot.index is None:
            return None
        return SlotBlock(blocks[slot.index].name, tuple(self._offsets), self.slot_shapes,
                         self.dtype.str)  # fmt: skip

    # Lending ----------------------------------------------------------------------------------

    def checkout(self, timeout_s: float | None = None) -> Slot:
        """A slot for one partition, blocking per ``on_empty`` while none is free.

        With "wait", ``timeout_s`` bounds the wait (None: forever) and `PoolExhausted` is raised
        when it runs out; with "fallback" it is unused. Raises `PoolClosedError` after `close`.
        """
        if timeout_s is not None and timeout_s < 0:
            raise ValueError(f"timeout_s must be non-negative or None, got {timeout_s}")
        with self._lock:
            self._check_open()
            if self._free or self.on_empty == "wait":
                if not self._free:
                    self._wait_for_free(timeout_s)
                return self._lend()
            self.checkouts += 1
            self.fallbacks += 1
        # Pageable memory is allocated outside the lock so it does not hold up releases.
        arrays = tuple(np.empty(shape, self.dtype) for shape in self.slot_shapes)
        return Slot(self, None, arrays, sum(a.nbytes for a in arrays), pinned=False)

    def try_checkout(self) -> Slot | None:
        """A pool slot if one is free now, else None, whatever ``on_empty`` says; never blocks.

        For asyncio callers: on None, await something and try again, or run `checkout` in a
        thread.
        """
        with self._lock:
            self._check_open()
            return self._lend() if self._free else None

    def release(self, slot: Slot) -> None:
        """Give ``slot`` back; a waiting `checkout` gets it. A fallback slot is just dropped.

        Releasing twice, or a slot of another pool, raises ValueError. After `close` a release
        is accepted and does nothing (the memory goes when the holder drops its arrays).
        """
        if slot._pool is not self:
            raise ValueError(f"{slot!r} belongs to another pool")
        with self._lock:
            if slot._arrays is None:
                raise ValueError(f"{slot!r} was already released")
            slot._arrays = None
            if slot.index is None or self._closed:
                return
            self._free.append(slot.index)
            self.in_use_bytes -= self.slot_bytes
            self._freed.notify()

    # Shutdown ---------------------------------------------------------------------------------

    def close(self) -> float:
        """Free every buffer and return how long it took, in seconds; later calls return that.

        The pool drops its references, so each slot's memory goes back (cudaFreeHost) as soon as
        no array of it is held elsewhere: a slot still checked out is freed when its holder
        lets go, never under it. Waiting checkouts and any later one raise `PoolClosedError`.
        """
        with self._lock:
            if self.freed_in_s is not None:
                return self.freed_in_s
            self._closed = True
            self._freed.notify_all()
            in_use = self.slots_total - len(self._free)
            start = self._clock()
            self._free.clear()
            self._arrays.clear()
            self._memory.clear()
            self._release_allocator()
            self.freed_in_s = self._clock() - start
            self.in_use_bytes = 0
        if in_use:
            logger.warning(
                "%d of %d slots were still checked out at close; they are freed when dropped",
                in_use, self.slots_total,
            )  # fmt: skip
        logger.info(
            "%s pool of %d slots (%s) freed in %.1f s",
            "pinned" if self.pinned else "pageable (numpy)", self.slots_total,
            _format_bytes(self.total_bytes), self.freed_in_s,
        )  # fmt: skip
        return self.freed_in_s

    def __enter__(self) -> PinnedPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<PinnedPool {self.backend}, {self.slots_free}/{self.slots_total} slots free "
            f"× {_format_bytes(self.slot_bytes)}, on_empty={self.on_empty!r}>"
        )

    # Internals (the lock is held) -------------------------------------------------------------

    def _add_slot(self) -> None:
        """The one place slot memory is allocated; counted so a hot-path allocation shows."""
        memory = self._allocator.allocate(self.slot_bytes)
        self.allocations += 1
        if self._warm:
            self.allocations_after_warmup += 1
        arrays = tuple(
            memory[offset : offset + math.prod(shape) * self.dtype.itemsize]
            .view(self.dtype)
            .reshape(shape)
            for shape, offset in zip(self.slot_shapes, self._offsets, strict=True)
        )
        self._memory.append(memory)
        self._arrays.append(arrays)

    def _lend(self) -> Slot:
        index = self._free.pop()
        self.in_use_bytes += self.slot_bytes
        self.checkouts += 1
        return Slot(self, index, self._arrays[index], self.slot_bytes, self.pinned)

    def _wait_for_free(self, timeout_s: float | None) -> None:
        self.waits += 1
        start = self._clock()
        try:
            ready = self._freed.wait_for(lambda: self._free or self._closed, timeout_s)
        finally:
            self.waited_s += self._clock() - start
        self._check_open()
        if not ready:
            raise PoolExhausted(self.slots_total, self.slot_bytes, timeout_s or 0.0)

    def _release_allocator(self) -> None:
        """What the allocator holds beyond the arrays (shared blocks, registrations) goes."""
        release = getattr(self._allocator, "release", None)
        if release is not None:
            release()

    def _check_open(self) -> None:
        if self._closed:
            raise PoolClosedError(f"pinned pool of {self.slots_total} slots is closed")


def _allocator_for(backend: Backend | HostAllocator) -> HostAllocator:
    if not isinstance(backend, str):
        return backend
    if backend == "auto":
        backend = "cuda" if cuda_available() else "numpy"
    if backend == "cuda":
        return CudaHostAllocator()
    if backend == "numpy":
        return NumpyHostAllocator()
    if backend in ("shared", "shared-cuda"):
        return SharedHostAllocator(register=backend == "shared-cuda")
    raise ValueError(
        f"backend must be 'auto', 'cuda', 'numpy', 'shared' or 'shared-cuda', got {backend!r}"
    )


def _layout(shapes: tuple[tuple[int, ...], ...], dtype: np.dtype[Any]) -> tuple[int, list[int]]:
    """A slot's size in bytes and each array's offset in it, every one ALIGNMENT_BYTES-aligned."""
    if not shapes:
        raise ValueError("slot_shapes must name at least one array shape, got none")
    offsets = []
    end = 0
    for shape in shapes:
        if not shape or any(d < 1 for d in shape):
            raise ValueError(f"every slot shape needs dimensions of at least 1, got {shape}")
        offsets.append(end)
        end += -(-math.prod(shape) * dtype.itemsize // ALIGNMENT_BYTES) * ALIGNMENT_BYTES
    return end, offsets


def _format_bytes(nbytes: float) -> str:
    """``_format_bytes(6 * 2**30)`` → '6.0 GiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(nbytes) < 1024:
            return f"{nbytes:.0f} B" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} TiB"


def _format_rate(nbytes: int, seconds: float) -> str:
    return f"{_format_bytes(nbytes / seconds)}/s" if seconds > 0 else "instant"
