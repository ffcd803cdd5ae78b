"""Synthesis in worker processes, written in place into shared-memory pool slots (no GPU)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from gpu import ntt
from gpu.pool import PinnedPool
from gpu.synthesis import ProcessSynthesizer
from pacer.workload import GpuNttWorkload, PartitionSpec


@pytest.fixture(scope="module")
def synthesizer() -> Iterator[ProcessSynthesizer]:
    with ProcessSynthesizer(2) as started:
        yield started


def shm_exists(name: str) -> bool:
    return os.path.exists(f"/dev/shm/{name.lstrip('/')}")


@pytest.mark.parametrize("log_n", [0, 5, 19], ids=lambda n: f"2^{n}")
def test_a_worker_process_writes_the_slot_the_parent_reads(
    synthesizer: ProcessSynthesizer, log_n: int
) -> None:
    with PinnedPool(2, [(1 << log_n,)] * 3, np.uint32, backend="shared") as pool:
        for index in range(3):  # the same slots again: the workers map each block once
            with pool.checkout() as slot:
                synthesizer.fill(pool.slot_block(slot), seed=5, index=index)
                expected = ntt.synthesize(5, index, log_n)
                assert all((s == e).all() for s, e in zip(slot.arrays, expected, strict=True))


def test_threads_fill_slots_through_the_processes_at_once(
    synthesizer: ProcessSynthesizer,
) -> None:
    with PinnedPool(4, [(1 << 12,)] * 3, np.uint32, backend="shared") as pool:
        slots = [pool.checkout() for _ in range(4)]
        threads = [
            threading.Thread(target=synthesizer.fill, args=(pool.slot_block(s), 9, i))
            for i, s in enumerate(slots)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, slot in enumerate(slots):
            assert (slot.arrays[2] == ntt.synthesize(9, i, 12)[2]).all()
            slot.release()


def test_a_slot_outside_shared_memory_is_refused(synthesizer: ProcessSynthesizer) -> None:
    with PinnedPool(1, [(8,)] * 3, np.uint32, backend="numpy") as pool, pool.checkout() as slot:
        assert pool.slot_block(slot) is None
        with pytest.raises(ValueError, match="not in shared memory"):
            synthesizer.fill(pool.slot_block(slot), 1, 0)


def test_shared_blocks_are_unlinked_when_the_pool_closes() -> None:
    pool = PinnedPool(3, [(64,)] * 3, np.uint32, backend="shared", on_empty="fallback")
    slot = pool.checkout()
    block = pool.slot_block(slot)
    assert block is not None
    assert shm_exists(block.name)
    assert block.shapes == ((64,),) * 3
    others = [pool.checkout(), pool.checkout()]
    fallback = pool.checkout()  # every slot is out: pageable memory, which no process can map
    assert fallback.index is None
    assert pool.slot_block(fallback) is None
    for held in [slot, *others, fallback]:
        held.release()
    pool.close()
    assert not shm_exists(block.name)


def test_the_gpu_workload_synthesizes_in_processes_and_frees_them() -> None:
    workload = GpuNttWorkload(10, [0], 1, "fallback", executor="processes", pool_backend="shared")
    workload.prepare(slots=2, budget_bytes=2**30, synthesis_workers=2)
    try:
        specs = [PartitionSpec("job", i, 77, {}) for i in range(3)]
        slots = [workload.synthesize(spec) for spec in specs]  # the third is a fallback
        assert [s.index is None for s in slots] == [False, False, True]
        for spec, slot in zip(specs, slots, strict=True):
            expected = ntt.synthesize(spec.seed, spec.index, 10)
            assert all((a == e).all() for a, e in zip(slot.arrays, expected, strict=True))
            workload.release(slot)
        block = workload.pool.slot_block(workload.pool.checkout())
        assert block is not None
        assert shm_exists(block.name)
    finally:
        workload.close()
    assert not shm_exists(block.name)


def test_a_pool_larger_than_dev_shm_is_refused_before_anything_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Tiny:
        f_bavail, f_frsize = 16, 4096  # 64 KiB free

    monkeypatch.setattr("gpu.pool.os.statvfs", lambda path: Tiny())
    with pytest.raises(RuntimeError, match=r"need 96\.0 KiB in /dev/shm, which has 64\.0 KiB"):
        PinnedPool(3, [(8192,)], np.uint32, backend="shared")
    assert not any(name.startswith("psm_") for name in os.listdir("/dev/shm"))
