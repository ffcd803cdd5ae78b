"""A pool's blocks as the synthesis workers map them: none while the pool is being pinned,
each when its worker first writes into it (`gpu.procs.worker_blocks`); real worker processes, their
mappings read from /proc/PID/maps."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from gpu.field.babybear import BABYBEAR
from gpu.pool.slots import SlotBlock, pool_layout
from gpu.procs import worker_blocks
from gpu.procs.executor import ProcessSynthesizer
from gpu.shm.block_maps import maps_inode, processes_mapping
from gpu.shm.blocks import HostBlock, create_block

LOG_N = 10


@pytest.fixture
def blocks() -> Iterator[list[HostBlock]]:
    layout = pool_layout(((1 << LOG_N,),) * 3, BABYBEAR.storage)
    made = [create_block(layout.slot_bytes) for _ in range(3)]
    yield made
    for block in made:
        block.unlink()


def workers_mapping(synthesizer: ProcessSynthesizer, block: HostBlock) -> set[int]:
    """The worker processes that map ``block``."""
    workers = {process.pid for process in synthesizer._executor._processes.values()}
    mapping = processes_mapping([maps_inode(*block.inode())], skip=[os.getpid()])
    return set(mapping) & workers


@pytest.mark.slow
def test_a_worker_maps_a_block_when_it_first_writes_into_it_and_none_before(
    blocks: list[HostBlock],
) -> None:
    # Sixteen workers filling in their page tables beside the pinning slowed it: once started
    # they map nothing, and each block is mapped by the worker that first writes into it.
    layout = pool_layout(((1 << LOG_N,),) * 3, BABYBEAR.storage)
    synthesizer = ProcessSynthesizer(2)
    try:
        synthesizer.start()
        assert all(workers_mapping(synthesizer, block) == set() for block in blocks)
        block = blocks[1]
        where = SlotBlock(block.name, layout.offsets, layout.shapes, layout.dtype, block.path)
        synthesizer.fill(where, seed=7, index=0)
        assert len(workers_mapping(synthesizer, blocks[1])) == 1  # the one that wrote it
        assert workers_mapping(synthesizer, blocks[0]) == set()
        assert workers_mapping(synthesizer, blocks[2]) == set()
    finally:
        synthesizer.close()


def test_a_block_two_threads_want_at_once_is_mapped_once(blocks: list[HostBlock]) -> None:
    path = blocks[0].path
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(worker_blocks.mapping(path)))
               for _ in range(4)]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(got) == 4
    assert all(mapping is got[0] for mapping in got)
    inode = str(os.stat(path).st_ino)
    with open("/proc/self/maps") as maps:
        # The block's own (its creator is this process too) and the worker's one.
        assert sum(line.split()[4] == inode for line in maps) == 2
