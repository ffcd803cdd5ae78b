"""The pinned pool on the NumPy backend: lending, policies, accounting, budget, shutdown."""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any, Literal

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu.pool.allocators import ALIGNMENT_BYTES, NumpyHostAllocator, SharedHostAllocator
from gpu.pool.pinned import PinnedPool, PoolClosedError, PoolExhausted
from gpu.pool.slots import Slot
from gpu.shm.blocks import HostBlock
from gpu.shm.handover import Handover
from tests.conftest import FakeClock
from tests.kept_pools import shared

N = 1000
SHAPES = [(N,), (N,), (N,)]
SLOT_BYTES = 3 * 8 * 1024  # 8000 bytes a vector, rounded up to the 256-byte alignment
JOIN_S = 10.0


class CountingAllocator(NumpyHostAllocator):
    """NumPy memory that counts the allocations asked of it."""

    name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    def allocate(self, nbytes: int) -> np.ndarray[tuple[int], np.dtype[np.uint8]]:
        self.calls += 1
        return super().allocate(nbytes)


class SignallingClock(FakeClock):
    """A fake clock that sets ``read`` each time it is read: the pool reads it as a wait starts,
    with its lock held, so once ``read`` is set a release has to wait until the waiter waits."""

    def __init__(self) -> None:
        super().__init__()
        self.read = threading.Event()

    def __call__(self) -> float:
        self.read.set()
        return super().__call__()


def make_pool(
    slots: int = 2, on_empty: Literal["wait", "fallback"] = "wait", clock: FakeClock | None = None
) -> PinnedPool:
    return PinnedPool.build(
        slots, SHAPES, backend="numpy", on_empty=on_empty, clock=clock or FakeClock()
    )


@pytest.fixture
def pool() -> Iterator[PinnedPool]:
    with make_pool() as pool:
        yield pool


def test_accounting_follows_checkout_and_release(pool: PinnedPool) -> None:
    assert (pool.slots_total, pool.slot_bytes, pool.total_bytes) == (2, SLOT_BYTES, 2 * SLOT_BYTES)
    assert (pool.in_use_bytes, pool.free_bytes, pool.slots_free) == (0, 2 * SLOT_BYTES, 2)

    first = pool.checkout()
    assert (pool.in_use_bytes, pool.free_bytes, pool.slots_free) == (SLOT_BYTES, SLOT_BYTES, 1)
    with pool.checkout() as second:
        assert (pool.in_use_bytes, pool.free_bytes, pool.slots_free) == (2 * SLOT_BYTES, 0, 0)
        assert {first.index, second.index} == {0, 1}
    assert pool.slots_free == 1
    first.release()

    assert (pool.in_use_bytes, pool.free_bytes, pool.slots_free) == (0, 2 * SLOT_BYTES, 2)
    assert (pool.checkouts, pool.waits, pool.fallbacks) == (2, 0, 0)


def test_slot_arrays_are_writable_views_of_the_right_shape_and_dtype() -> None:
    shapes = [(N,), (3, 5), (7,)]
    with PinnedPool.build(2, shapes, dtype=np.uint32, backend="numpy") as pool:
        slots = [pool.checkout(), pool.checkout()]
        for value, slot in enumerate(slots):
            assert [a.shape for a in slot.arrays] == shapes
            assert all(a.dtype == np.uint32 for a in slot.arrays)
            assert all(a.ctypes.data % ALIGNMENT_BYTES == 0 for a in slot.arrays)
            for array in slot.arrays:
                array[...] = value
        # No two arrays, in one slot or across slots, share memory: each kept what it was given.
        arrays = [a for slot in slots for a in slot.arrays]
        assert not any(
            np.shares_memory(x, y) for i, x in enumerate(arrays) for y in arrays[i + 1 :]
        )
        for value, slot in enumerate(slots):
            assert all((a == value).all() for a in slot.arrays)


def test_a_slot_checked_out_again_hands_out_the_same_memory(pool: PinnedPool) -> None:
    with pool.checkout() as slot:
        slot.arrays[0][:] = 42
        index, address = slot.index, slot.arrays[0].ctypes.data
    reused = pool.checkout()
    assert reused.index == index
    assert reused.arrays[0].ctypes.data == address
    assert (reused.arrays[0] == 42).all()


def test_a_released_slot_refuses_use_and_a_second_release(pool: PinnedPool) -> None:
    slot = pool.checkout()
    slot.release()
    with pytest.raises(RuntimeError, match="was released"):
        _ = slot.arrays
    with pytest.raises(ValueError, match="already released"):
        pool.release(slot)
    assert pool.slots_free == 2


def test_release_refuses_a_slot_of_another_pool(pool: PinnedPool) -> None:
    with make_pool() as other, other.checkout() as slot, pytest.raises(ValueError, match="another"):
        pool.release(slot)


def test_wait_policy_blocks_until_another_thread_releases() -> None:
    clock = SignallingClock()
    pool = make_pool(slots=1, clock=clock)
    held = pool.checkout()
    got: list[Slot] = []
    clock.read.clear()
    waiter = threading.Thread(target=lambda: got.append(pool.checkout(timeout_s=JOIN_S)))
    waiter.start()

    assert clock.read.wait(JOIN_S), "the waiter never started waiting"
    assert got == []
    clock.advance(2.5)
    held.release()
    waiter.join(JOIN_S)

    assert not waiter.is_alive()
    assert [slot.index for slot in got] == [0]
    assert (pool.waits, pool.waited_s, pool.checkouts) == (1, 2.5, 2)
    assert pool.slots_free == 0


def test_wait_policy_times_out_with_the_numbers(pool: PinnedPool) -> None:
    assert pool.checkout(timeout_s=0).index is not None  # a free slot: lent without a wait
    assert pool.checkout(timeout_s=0).index is not None
    assert pool.waits == 0
    with pytest.raises(PoolExhausted, match=r"within 0 s: all 2 slots \(2 × 24.0 KiB\)") as info:
        pool.checkout(timeout_s=0)
    assert (info.value.slots_total, info.value.slot_bytes, info.value.timeout_s) == (
        2,
        SLOT_BYTES,
        0,
    )
    assert (pool.waits, pool.checkouts, pool.in_use_bytes) == (1, 2, 2 * SLOT_BYTES)


def test_fallback_policy_lends_pageable_memory_and_drops_it_on_release() -> None:
    with make_pool(slots=1, on_empty="fallback") as pool:
        pinned = pool.checkout()
        fallback = pool.checkout()
        assert (fallback.index, fallback.pinned) == (None, False)
        assert [a.shape for a in fallback.arrays] == SHAPES
        assert not np.shares_memory(fallback.arrays[0], pinned.arrays[0])
        fallback.arrays[2][:] = 1
        assert (pool.checkouts, pool.fallbacks, pool.waits) == (2, 1, 0)
        assert (pool.in_use_bytes, pool.slots_free) == (SLOT_BYTES, 0)

        fallback.release()
        assert (pool.in_use_bytes, pool.slots_free) == (SLOT_BYTES, 0)
        pinned.release()
        assert (pool.in_use_bytes, pool.slots_free) == (0, 1)
        assert pool.checkout().index == 0
        assert pool.allocations == 1


@given(st.lists(st.booleans(), max_size=60), st.integers(1, 4))
def test_in_use_never_exceeds_total(steps: list[bool], slots: int) -> None:
    """True checks out (falling back when empty), False releases the oldest slot held."""
    held: list[Slot] = []
    fallbacks = 0
    with make_pool(slots=slots, on_empty="fallback") as pool:
        for checkout in steps:
            if checkout:
                fallbacks += pool.slots_free == 0
                held.append(pool.checkout())
            elif held:
                held.pop(0).release()
            pinned_held = sum(slot.index is not None for slot in held)
            assert 0 <= pool.in_use_bytes <= pool.total_bytes
            assert pool.in_use_bytes == pinned_held * pool.slot_bytes
            assert pool.slots_free == slots - pinned_held
            assert pool.free_bytes + pool.in_use_bytes == pool.total_bytes
        assert (pool.checkouts, pool.fallbacks) == (sum(steps), fallbacks)


def test_no_allocation_after_warmup_over_many_cycles() -> None:
    allocator = CountingAllocator()
    with PinnedPool.build(3, SHAPES, backend=allocator, on_empty="fallback") as pool:
        assert allocator.calls == pool.allocations == 3
        for _ in range(500):
            slots = [pool.checkout() for _ in range(4)]  # one more than the pool holds
            for slot in slots:
                slot.release()
        assert pool.fallbacks == 500
        assert allocator.calls == pool.allocations == 3
        assert pool.allocations_after_warmup == 0


def test_an_allocation_after_warmup_is_counted() -> None:
    """The counter is real: the pool's one allocation path, run once warm, shows in it."""
    with make_pool() as pool:
        pool._add_slot()
        assert (pool.allocations, pool.allocations_after_warmup) == (3, 1)


def test_allocation_is_timed_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    allocator = CountingAllocator()
    allocate = allocator.allocate

    def slow_allocate(nbytes: int) -> np.ndarray[tuple[int], np.dtype[np.uint8]]:
        clock.advance(0.5)
        return allocate(nbytes)

    allocator.allocate = slow_allocate  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, "gpu.pool.pinned"):
        pool = PinnedPool.build(4, SHAPES, backend=allocator, clock=clock)
    assert pool.allocated_in_s == 2.0
    assert "4 slots × 24.0 KiB = 96.0 KiB ready in 2.0 s (48.0 KiB/s): 0 adopted, 4 allocated" in (
        caplog.text
    )
    pool.close()


def test_budget_check_names_the_numbers() -> None:
    gib = 2**30
    message = (
        "pinned pool of 60 slots × 6.0 GiB = 360.0 GiB does not fit the memory budget of "
        "300.0 GiB; lower the slot count or raise the budget"
    )
    allocator = CountingAllocator()
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        PinnedPool.build(60, [(gib // 4,)] * 3, budget_bytes=300 * gib, backend=allocator)
    assert allocator.calls == 0


def test_a_pool_within_budget_is_built() -> None:
    with PinnedPool.build(2, SHAPES, budget_bytes=2 * SLOT_BYTES, backend="numpy") as pool:
        assert pool.total_bytes == 2 * SLOT_BYTES


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"slots": 0}, "slots must be at least 1, got 0"),
        ({"slot_shapes": []}, "at least one array shape"),
        ({"slot_shapes": [(4,), (0,)]}, r"dimensions of at least 1, got \(0,\)"),
        ({"on_empty": "drop"}, "on_empty must be 'wait' or 'fallback', got 'drop'"),
        (
            {"backend": "opencl"},
            "backend must be 'auto', 'cuda', 'numpy', 'shared' or 'shared-cuda', got 'opencl'",
        ),
    ],
    ids=["no-slots", "no-shapes", "empty-shape", "bad-policy", "bad-backend"],
)
def test_construction_states_the_rule(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"slots": 2, "slot_shapes": SHAPES, "backend": "numpy"}
    with pytest.raises(ValueError, match=message):
        PinnedPool.build(**{**arguments, **kwargs})  # type: ignore[arg-type]


def test_close_frees_logs_and_is_idempotent(caplog: pytest.LogCaptureFixture) -> None:
    pool = make_pool()
    with caplog.at_level(logging.INFO, "gpu.pool.pinned"):
        freed_in_s = pool.close()
    assert freed_in_s == pool.freed_in_s == 0.0
    assert "pool of 2 slots (48.0 KiB) freed in 0.0 s" in caplog.text
    assert (pool.closed, pool.slots_free, pool._memory, pool._arrays) == (True, 0, [], [])

    caplog.clear()
    assert pool.close() == 0.0
    assert caplog.text == ""
    with pytest.raises(PoolClosedError):
        pool.checkout()
    with pytest.raises(PoolClosedError):
        pool.checkout(timeout_s=0)


def test_close_with_a_slot_out_keeps_its_memory_until_released(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = make_pool()
    slot = pool.checkout()
    with caplog.at_level(logging.WARNING, "gpu.pool.pinned"):
        pool.close()
    assert "1 of 2 slots were still checked out at close" in caplog.text
    slot.arrays[0][:] = 3  # still the holder's, not freed under it
    slot.release()
    assert pool.in_use_bytes == 0


def test_a_shared_slot_out_at_close_is_unlinked_and_unmapped_quietly_when_dropped(
    monkeypatch: pytest.MonkeyPatch, shm_dir: str
) -> None:
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    pool = PinnedPool.build(2, SHAPES, backend=shared(shm_dir), on_empty="wait", clock=FakeClock())
    slot = pool.checkout()
    block = pool.slot_block(slot)
    assert block is not None
    pool.close()
    assert not os.path.exists(os.path.join(shm_dir, block.name))  # unlinked at close
    slot.arrays[0][:] = 5  # the mapping is still the holder's
    slot.release()
    del slot
    gc.collect()
    assert unraisable == []  # no BufferError from a block's __del__


def test_a_shared_pool_to_pin_makes_its_blocks_before_needing_cupy(
    monkeypatch: pytest.MonkeyPatch, shm_dir: str
) -> None:
    """CuPy is imported beside the filling of the blocks, not before they are made; where it
    is missing the pool says so and leaves no block behind."""
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    allocator = SharedHostAllocator(True, Handover(directory=shm_dir), threads=2)
    made: list[str] = []
    new_block = allocator._new_block

    def recorded(nbytes: int) -> HostBlock:
        block = new_block(nbytes)
        made.append(block.path)
        return block

    monkeypatch.setattr(allocator, "_new_block", recorded)
    with pytest.raises(RuntimeError, match=r"backend 'cuda' needs CuPy \(pip install"):
        PinnedPool.build(2, SHAPES, backend=allocator, clock=FakeClock())
    assert len(made) == 2
    assert not any(os.path.exists(path) for path in made)


def test_close_wakes_a_waiting_checkout() -> None:
    clock = SignallingClock()
    pool = make_pool(slots=1, clock=clock)
    pool.checkout()
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            pool.checkout(timeout_s=JOIN_S)
        except PoolClosedError as error:
            errors.append(error)

    clock.read.clear()
    waiter = threading.Thread(target=wait)
    waiter.start()
    assert clock.read.wait(JOIN_S)
    pool.close()
    waiter.join(JOIN_S)
    assert not waiter.is_alive()
    assert len(errors) == 1


@pytest.mark.gpu
def test_cuda_backend_lends_pinned_memory(cupy_module: Any) -> None:
    cupy = cupy_module
    with PinnedPool.build(2, SHAPES, backend="auto") as pool, pool.checkout() as slot:
        assert (pool.backend, slot.pinned) == ("cuda", True)
        a = slot.arrays[0]
        attributes = cupy.cuda.runtime.pointerGetAttributes(a.ctypes.data)
        assert attributes.type == cupy.cuda.runtime.memoryTypeHost
        a[:] = np.arange(N, dtype=np.uint64)
        assert (cupy.asarray(a).get() == a).all()
