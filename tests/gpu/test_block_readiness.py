"""A pool's blocks mapped by the synthesis workers one by one as they are pinned, and never
before (`gpu.worker_blocks.BlockReadiness`): real worker processes, their mappings read
from /proc/PID/maps; and the mapping thread of a worker, run here."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from gpu import worker_blocks
from gpu.allocators import SharedHostAllocator
from gpu.block_maps import maps_inode, processes_mapping
from gpu.pool import PinnedPool
from gpu.process_executor import ProcessSynthesizer
from gpu.shm_blocks import HostBlock, create_block
from gpu.worker_blocks import BlockReadiness

BLOCK_BYTES = 16 * 4096


@pytest.fixture
def blocks() -> Iterator[list[HostBlock]]:
    made = [create_block(BLOCK_BYTES) for _ in range(3)]
    yield made
    for block in made:
        block.unlink()


def workers_mapping(synthesizer: ProcessSynthesizer, block: HostBlock) -> set[int]:
    """The worker processes that map ``block``."""
    workers = {process.pid for process in synthesizer._executor._processes.values()}
    mapping = processes_mapping([maps_inode(*block.inode())], skip=[os.getpid()])
    return set(mapping) & workers


def until(condition: object, limit_s: float = 20.0) -> None:
    """Wait on real worker processes until ``condition()`` holds (polled), at most
    ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the workers did not get there in time"
        time.sleep(0.01)


def started(synthesizer: ProcessSynthesizer, readiness: BlockReadiness) -> threading.Thread:
    """`ProcessSynthesizer.start` on a thread: it waits for the blocks to exist."""
    starting = threading.Thread(target=synthesizer.start, args=(readiness,))
    starting.start()
    return starting


def test_each_worker_maps_a_block_once_it_is_ready_and_none_before(
    blocks: list[HostBlock],
) -> None:
    readiness = BlockReadiness(poll_s=0.001)
    synthesizer = ProcessSynthesizer(2)
    try:
        starting = started(synthesizer, readiness)
        readiness.blocks_made([block.path for block in blocks])
        starting.join()
        workers = {process.pid for process in synthesizer._executor._processes.values()}
        assert len(workers) == 2
        readiness.block_ready(1)
        until(lambda: workers_mapping(synthesizer, blocks[1]) == workers)
        # Both have polled past block 1: blocks 0 and 2, not ready, are mapped by neither.
        assert workers_mapping(synthesizer, blocks[0]) == set()
        assert workers_mapping(synthesizer, blocks[2]) == set()
        readiness.block_ready(0)  # while the pool is still being pinned: mapped by both
        until(lambda: workers_mapping(synthesizer, blocks[0]) == workers)
        readiness.block_ready(2)
        synthesizer.map_ready(readiness)  # every block pinned; what is left, a fill maps
        assert synthesizer.blocks == tuple(block.path for block in blocks)
    finally:
        synthesizer.close()


@pytest.mark.parametrize("made", [True, False], ids=["after-blocks-made", "before-any-block"])
def test_an_abandoned_pool_releases_the_waiting_workers(
    blocks: list[HostBlock], made: bool
) -> None:
    readiness = BlockReadiness(poll_s=0.001)
    synthesizer = ProcessSynthesizer(1)
    try:
        starting = started(synthesizer, readiness)
        if made:
            readiness.blocks_made([block.path for block in blocks])
            readiness.block_ready(0)
        readiness.abandon()
        starting.join(20)
        assert not starting.is_alive()
        synthesizer.map_ready(readiness)
        assert workers_mapping(synthesizer, blocks[2]) == set()
    finally:
        synthesizer.close()


class RecordingWatcher:
    """Records what the allocator tells it, and whether each block's pages exist by then."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.ready: list[tuple[int, bool]] = []

    def blocks_made(self, paths: Sequence[str]) -> None:
        assert not self.paths
        assert not self.ready
        self.paths = list(paths)

    def block_ready(self, index: int) -> None:
        allocated = os.stat(self.paths[index]).st_blocks * 512
        self.ready.append((index, allocated >= os.stat(self.paths[index]).st_size))


@pytest.mark.parametrize("populate", [True, False], ids=["populated", "first-write"])
def test_the_allocator_tells_its_watcher_of_each_block_once_ready(populate: bool) -> None:
    watcher = RecordingWatcher()
    allocator = SharedHostAllocator(False, threads=2, populate=populate, watcher=watcher)
    with PinnedPool(3, [(4096,)] * 3, np.uint32, allocator) as pool:
        assert watcher.paths == list(pool.block_paths)
        assert sorted(index for index, _ in watcher.ready) == [0, 1, 2]
        # Populated before it is told ready, or (without populating) left to the first write.
        assert all(pages == populate for _, pages in watcher.ready)


def flags_file(tmp_path: Path, flags: bytes) -> str:
    path = tmp_path / "flags"
    path.write_bytes(flags)
    return str(path)


def test_the_mapping_thread_runs_at_the_lowest_priority_and_stops_once_pinned(
    blocks: list[HostBlock], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sixteen workers mapping at the pinning threads' priority took the cores the pinning
    # needs; the worker's own thread, which synthesizes, keeps its priority.
    priorities: list[int] = []
    release = threading.Event()

    def slow_map(path: str) -> int:
        priorities.append(os.getpriority(os.PRIO_PROCESS, 0))  # 0: this thread, on Linux
        release.wait(20)
        return 0

    monkeypatch.setattr(worker_blocks, "_map_new", slow_map)
    paths = [block.path for block in blocks]
    own = os.getpriority(os.PRIO_PROCESS, 0)
    # Every block pinned: the task returns though its thread is still on the first block.
    assert worker_blocks.map_while_pinned(paths, flags_file(tmp_path, b"\1\1\1\0"), 0.001) == 0
    thread = worker_blocks._mapping_thread
    assert thread is not None
    assert thread.is_alive()
    release.set()
    thread.join(20)
    assert not thread.is_alive()
    # It stopped after that block: a starved thread would hold a lock a synthesis waits for.
    assert priorities == [worker_blocks.LOWEST_PRIORITY]
    assert os.getpriority(os.PRIO_PROCESS, 0) == own


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


def test_a_block_being_populated_is_handed_out_at_once(
    blocks: list[HostBlock], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A mapping thread of the lowest priority, starved inside its populate, must not hold up a
    # synthesis that wants the same block: that one writes at once, faulting its pages in.
    populating, release = threading.Event(), threading.Event()

    def starved(path: str, made: object) -> int:
        populating.set()
        release.wait(30)
        return 0

    monkeypatch.setattr(worker_blocks, "_populate", starved)
    path = blocks[1].path
    mapper = threading.Thread(target=worker_blocks.mapping, args=(path,))
    mapper.start()
    assert populating.wait(30)
    got: list[object] = []
    wanting = threading.Thread(target=lambda: got.append(worker_blocks.mapping(path)))
    wanting.start()
    wanting.join(10)  # at once; waiting on the starved thread would take its 30 s
    try:
        assert not wanting.is_alive()
        assert got == [worker_blocks._mapped[path]]
    finally:
        release.set()
        mapper.join()
        wanting.join()
