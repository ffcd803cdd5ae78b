"""The pinned host-memory pool: every page-locked buffer is allocated once, before readiness.

Pinned memory makes copies to the GPU fast but is slow to get, and getting it slows running
kernels. So the pool allocates all its slots when it is built and only lends them afterwards
(docs/decisions/gpu.md, D93). `allocations_after_warmup` counts later allocations; it must
stay 0.

A slot (`gpu.pool.slots.Slot`) holds one partition's buffers a, b and c. A synthesis fills them
in place, and a GPU worker copies them to the device. With the "shared" backends each slot is a
shared-memory block that other processes write in place (`slot_block`).

>>> with PinnedPool.build(slots=2, slot_shapes=[(8,), (8,), (8,)], backend="numpy") as pool:
...     with pool.checkout() as slot:
...         a, b, c = slot.arrays
...         a[:] = 7
...         pool.in_use_bytes == pool.slot_bytes
...     pool.in_use_bytes, pool.checkouts, pool.allocations_after_warmup
True
(0, 1, 0)
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from gpu.pool.allocators import PROGRESS_EVERY_S, Backend, ByteArray, HostAllocator, allocator_for
from gpu.pool.slots import Slot, SlotBlock, pool_layout
from gpu.sizes import format_bytes, format_rate

__all__ = ["PinnedPool", "PoolClosedError", "PoolExhausted"]

logger = logging.getLogger("gpu.pool.pinned")

OnEmpty = Literal["wait", "fallback"]


class PoolExhausted(Exception):  # noqa: N818 - the domain name STYLE.md uses
    """No slot came free within the checkout's timeout (``on_empty="wait"``)."""

    def __init__(self, slots_total: int, slot_bytes: int, timeout_s: float) -> None:
        self.slots_total = slots_total
        self.slot_bytes = slot_bytes
        self.timeout_s = timeout_s
        super().__init__(
            f"no pinned slot came free within {timeout_s:g} s: all {slots_total} slots "
            f"({slots_total} × {format_bytes(slot_bytes)}) are checked out"
        )


class PoolClosedError(RuntimeError):
    """The pool was closed; its memory is gone and it lends nothing more."""


class PinnedPool:
    """A fixed set of slots of pinned host memory, allocated by `open` and lent thread-safely.

    Each slot holds one array of ``dtype`` per shape in ``slot_shapes``, in one allocation.
    ``backend`` is "cuda", "numpy", "shared", "shared-cuda" or "auto", or a
    `gpu.pool.allocators.HostAllocator`. ``field`` is recorded with blocks kept for the next pacer.

    ``on_empty`` says what `checkout` does when every slot is out:

    - "wait" blocks until a release, or raises `PoolExhausted` at the timeout; counted in `waits`.
    - "fallback" lends new pageable memory, dropped on release; counted in `fallbacks`.

    Raises ValueError if the pool would exceed ``budget_bytes``. ``clock`` returns seconds.

    The constructor only checks and stores. `open` (or `build`) allocates or adopts the slots; on
    the cuda backend that takes seconds, so run it on a thread before the service reports ready.
    The counters are plain ints, read without the lock.
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
        field: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        if on_empty not in ("wait", "fallback"):
            raise ValueError(f"on_empty must be 'wait' or 'fallback', got {on_empty!r}")
        self.dtype = np.dtype(dtype)
        self.slot_shapes = tuple(tuple(int(d) for d in shape) for shape in slot_shapes)
        self.layout = pool_layout(self.slot_shapes, self.dtype, field)
        self.slot_bytes, self._offsets = self.layout.slot_bytes, list(self.layout.offsets)
        self.slots_total = slots
        self.total_bytes = slots * self.slot_bytes
        if budget_bytes is not None and self.total_bytes > budget_bytes:
            raise ValueError(
                f"pinned pool of {slots} slots × {format_bytes(self.slot_bytes)} = "
                f"{format_bytes(self.total_bytes)} does not fit the memory budget of "
                f"{format_bytes(budget_bytes)}; lower the slot count or raise the budget"
            )
        self.on_empty: OnEmpty = on_empty
        self._clock = clock
        self._allocator = allocator_for(backend)
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
        self.allocated_in_s: float | None = None

    @classmethod
    def build(
        cls,
        slots: int,
        slot_shapes: Sequence[tuple[int, ...]],
        dtype: npt.DTypeLike = np.uint64,
        backend: Backend | HostAllocator = "auto",
        on_empty: OnEmpty = "wait",
        *,
        budget_bytes: int | None = None,
        field: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> PinnedPool:
        """Construct a pool with these arguments and open it."""
        pool = cls(slots, slot_shapes, dtype, backend, on_empty, budget_bytes=budget_bytes,
                   field=field, clock=clock)  # fmt: skip
        pool.open()
        return pool

    def open(self) -> None:
        """Allocate every slot, or adopt those a previous pacer kept. Call it once.

        Progress is logged every few seconds. Errors from the allocator (out of memory, a full
        shared-memory directory) propagate, and nothing is left held.
        """
        if self._warm or self._closed:
            raise RuntimeError("a pool opens once")
        clock, slots = self._clock, self.slots_total
        start = clock()
        self._allocator.reserve(self.layout, slots)  # a shared pool's pinning, on threads
        last_report = clock()
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
                self._allocator.release()
                logger.error(
                    "allocating %s slot %d of %d (%s each) failed after %.1f s",
                    self.backend, index + 1, slots, format_bytes(self.slot_bytes),
                    clock() - start,
                )  # fmt: skip
                raise
        self.allocated_in_s = clock() - start
        self._free = list(range(slots - 1, -1, -1))  # popped from the end: slot 0 goes first
        self._warm = True
        adopted = self.slots_adopted
        logger.info(
            "%s pool of %d slots × %s = %s ready in %.1f s (%s): %d adopted, %d allocated",
            "pinned" if self.pinned else f"pageable ({self.backend})", slots,
            format_bytes(self.slot_bytes), format_bytes(self.total_bytes),
            self.allocated_in_s, format_rate(self.total_bytes, self.allocated_in_s),
            adopted, slots - adopted,
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
    def slots_adopted(self) -> int:
        """Slots whose memory a previous pacer left (`gpu.shm.handover`)."""
        return self._allocator.slots_adopted

    @property
    def block_names(self) -> tuple[str, ...]:
        """The slots' shared-memory blocks, in slot order; empty unless the backend is shared."""
        return tuple(block.name for block in self._allocator.blocks)

    @property
    def block_paths(self) -> tuple[str, ...]:
        """Where another process opens each slot's block, in slot order (`slot_block`)."""
        return tuple(block.path for block in self._allocator.blocks)

    def slot_block(self, slot: Slot) -> SlotBlock | None:
        """Where ``slot`` lives, for another process to write it.

        None unless the backend is shared and the slot is a pool slot, not a fallback.
        """
        blocks = self._allocator.blocks
        if not blocks or slot.index is None:
            return None
        block = blocks[slot.index]
        return SlotBlock(block.name, tuple(self._offsets), self.slot_shapes, self.dtype.str,
                         block.path)  # fmt: skip

    # Lending ----------------------------------------------------------------------------------

    def checkout(self, timeout_s: float | None = None) -> Slot:
        """Lend a slot for one partition; if none is free, act per ``on_empty``.

        With "wait", ``timeout_s`` bounds the wait (None: forever); then `PoolExhausted` is
        raised. Raises `PoolClosedError` after `close`.
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

    def release(self, slot: Slot) -> None:
        """Give ``slot`` back, to a waiting `checkout` if there is one. A fallback slot is dropped.

        Raises ValueError for a slot released twice or from another pool.
        After `close` it does nothing.
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

    def close(self, keep: bool = False) -> float:
        """Free every buffer; return the seconds it took (later calls return the same).

        A slot still checked out is freed when its holder lets go, never under it. Waiting and later
        checkouts raise `PoolClosedError`. With ``keep``, shared blocks stay for the next pacer
        (`gpu.shm.handover`); other backends free their memory all the same.
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
            kept = self._allocator.release(keep)
            self.freed_in_s = self._clock() - start
            self.in_use_bytes = 0
        if in_use:
            logger.warning(
                "%d of %d slots were still checked out at close; they are freed when dropped",
                in_use, self.slots_total,
            )  # fmt: skip
        if keep and not kept:
            logger.warning("the %s pool cannot be kept for the next pacer: freed", self.backend)
        logger.info(
            "%s pool of %d slots (%s) %s in %.1f s",
            "pinned" if self.pinned else f"pageable ({self.backend})", self.slots_total,
            format_bytes(self.total_bytes),
            "kept for the next pacer" if kept else "freed", self.freed_in_s,
        )  # fmt: skip
        return self.freed_in_s

    def __enter__(self) -> PinnedPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<PinnedPool {self.backend}, {self.slots_free}/{self.slots_total} slots free "
            f"× {format_bytes(self.slot_bytes)}, on_empty={self.on_empty!r}>"
        )

    # Internals (the lock is held) -------------------------------------------------------------

    def _add_slot(self) -> None:
        """Allocate one slot; the one place that does, so late allocations are counted."""
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

    def _check_open(self) -> None:
        if self._closed:
            raise PoolClosedError(f"pinned pool of {self.slots_total} slots is closed")
