"""A shared pool kept by one process and adopted by the next: the round trip, a layout that
does not fit, a crashed holder whose processes linger, and the lock that keeps a live pool
from a second process. Holders are real processes (`tests.kept_pools`); every pool lives in the
test's own directory (``shm_dir``), which each test leaves empty."""

from __future__ import annotations

import logging
import os
import threading

import numpy as np
import pytest

from gpu.pool.allocators import SharedHostAllocator
from gpu.pool.pinned import PinnedPool
from gpu.shm.blocks import BLOCK_PREFIX, block_owner
from gpu.shm.handover import Handover
from gpu.shm.record import sweep
from tests.kept_pools import MARK, Holder, records, shm_exists, start_mapper, stop

pytestmark = pytest.mark.slow


def adopting_pool(
    directory: str, slots: int = 2, n: int = 1024, keep: bool = False, **handover: float
) -> PinnedPool:
    allocator = SharedHostAllocator(
        False,
        Handover(keep, directory=directory, **handover),  # type: ignore[arg-type]
    )
    return PinnedPool.build(slots, [(n,)] * 3, np.uint32, allocator, field="babybear")


def marks(pool: PinnedPool) -> list[int]:
    """What the first element of each slot holds, in slot order."""
    held = [pool.checkout() for _ in range(pool.slots_total)]
    found = sorted((slot.index or 0, int(slot.arrays[0][0])) for slot in held)
    for slot in held:
        slot.release()
    return [mark for _, mark in found]


def test_a_kept_pool_is_adopted_whole_by_the_next_process(shm_dir: str) -> None:
    holder = Holder(slots=2)
    holder.close(keep=True)
    ((_, kept),) = records(shm_dir).items()
    assert (kept.state, kept.holder_pid, kept.generation) == ("kept", holder.pid, 1)
    assert list(kept.blocks) == holder.names
    assert all(shm_exists(shm_dir, name) for name in holder.names)

    pool = adopting_pool(shm_dir, keep=True)
    assert (pool.slots_adopted, pool.allocations) == (2, 2)
    assert marks(pool) == [MARK, MARK + 1]  # the same memory, not new
    assert all(block_owner(name) == os.getpid() for name in pool.block_names)
    assert not any(shm_exists(shm_dir, name) for name in holder.names)  # renamed for their holder
    ((_, taken),) = records(shm_dir).items()
    assert (taken.state, taken.holder_pid, taken.creator_pid) == ("in-use", os.getpid(), holder.pid)
    assert taken.generation == 2
    pool.close()  # not kept: gone, record and all
    assert records(shm_dir) == {}
    assert not any(shm_exists(shm_dir, name) for name in pool.block_names)


@pytest.mark.parametrize(
    ("slots", "adopted", "removed"), [(3, 2, 0), (1, 1, 1)], ids=["topped-up", "extra-removed"]
)
def test_a_pool_of_another_size_adopts_what_fits(
    slots: int, adopted: int, removed: int, shm_dir: str
) -> None:
    holder = Holder(slots=2)
    holder.close(keep=True)
    pool = adopting_pool(shm_dir, slots)
    assert (pool.slots_adopted, pool.slots_total) == (adopted, slots)
    assert marks(pool)[:adopted] == [MARK, MARK + 1][:adopted]
    left = [n for n in os.listdir(shm_dir) if n.startswith(BLOCK_PREFIX)]
    assert sorted(left) == sorted(pool.block_names)  # the extra one went
    assert len(holder.names) - adopted == removed
    pool.close()


def test_an_incompatible_pool_is_removed_and_logged(
    caplog: pytest.LogCaptureFixture, shm_dir: str
) -> None:
    holder = Holder(slots=2, n=1024)
    holder.close(keep=True)
    with caplog.at_level(logging.WARNING, "gpu.shm.handover"):
        pool = adopting_pool(shm_dir, n=2048)
    assert pool.slots_adopted == 0
    assert not any(shm_exists(shm_dir, name) for name in holder.names)
    assert "its 12.0 KiB slots of 1024+1024+1024 <u4 are not this pool's 24.0 KiB" in caplog.text
    pool.close()


def test_a_live_pools_blocks_are_never_taken(
    caplog: pytest.LogCaptureFixture, shm_dir: str
) -> None:
    holder = Holder(slots=2)  # holds its record's lock while it runs
    try:
        pool = adopting_pool(shm_dir)
        assert pool.slots_adopted == 0
        assert all(shm_exists(shm_dir, name) for name in holder.names)
        assert sweep(shm_dir).removed_blocks == 0
        pool.close()
    finally:
        holder.close(keep=False)
    assert not any(shm_exists(shm_dir, name) for name in holder.names)


def test_a_crashed_holders_pool_is_adopted_once_its_processes_let_go(
    caplog: pytest.LogCaptureFixture, shm_dir: str
) -> None:
    holder = Holder(slots=2)
    lingering = start_mapper(holder.paths[1])  # as a synthesis process of the holder would
    holder.kill()
    ((_, left),) = records(shm_dir).items()
    assert (left.state, left.holder_pid) == ("in-use", holder.pid)
    built: list[PinnedPool] = []
    adopting = threading.Thread(target=lambda: built.append(adopting_pool(shm_dir)))
    waiting = threading.Event()

    class Told(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "to let go of the blocks" in record.getMessage():
                waiting.set()

    told = Told()
    logging.getLogger("gpu.shm.handover").addHandler(told)
    try:
        adopting.start()
        assert waiting.wait(30), "the adoption did not wait for the lingering process"
        assert not built  # still waiting: the block is mapped elsewhere
        stop(lingering)
        adopting.join(30)
    finally:
        logging.getLogger("gpu.shm.handover").removeHandler(told)
    (pool,) = built
    assert (pool.slots_adopted, marks(pool)) == (2, [MARK, MARK + 1])
    pool.close()


def test_blocks_still_mapped_after_the_wait_are_given_up(
    caplog: pytest.LogCaptureFixture, shm_dir: str
) -> None:
    holder = Holder(slots=2)
    lingering = start_mapper(holder.paths[0])
    holder.kill()
    try:
        with caplog.at_level(logging.ERROR, "gpu.shm.handover"):
            pool = adopting_pool(shm_dir, wait_s=0.0)
        assert pool.slots_adopted == 0
        assert f"processes {lingering.pid} still map the blocks pacer {holder.pid} left" in (
            caplog.text
        )
        assert not any(shm_exists(shm_dir, name) for name in holder.names)
        pool.close()
    finally:
        stop(lingering)


def test_a_record_whose_blocks_are_gone_is_stale_and_so_are_blocks_without_one(
    shm_dir: str,
) -> None:
    holder = Holder(slots=2)
    holder.close(keep=True)
    os.unlink(f"{shm_dir}/{holder.names[0]}")
    done = sweep(shm_dir)
    assert done.kept == ()
    ((_, why),) = done.stale_records
    assert why == f"its block {holder.names[0]} is gone"
    assert (done.removed_blocks, records(shm_dir)) == (1, {})
    assert not shm_exists(shm_dir, holder.names[1])
