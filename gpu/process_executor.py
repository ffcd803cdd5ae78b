"""Synthesis in worker processes that write straight into shared pool slots.

Threads of one process share the GIL: each NumPy call a synthesis makes (thousands a partition)
gives it up and takes it back, and with many threads, or a busy event loop, taking it back
waits. Worker processes each have their own. A `ProcessSynthesizer` keeps a pool of them; each
maps the pool's shared-memory blocks by path (once per block) and runs
`gpu.synthesis.synthesize_into` on the slot it is told, so only a slot reference crosses the
process boundary and the buffers are written once, in place, where the GPU copies them from.

A process's first write to each 4 KiB page of a mapping it did not create is a page fault: for
a 3 GiB slot, 786,432 of them, which made synthesis about half as slow again until every worker
had written every slot, minutes into a run. Each worker therefore fills in its page tables for
every block when it starts (``MADV_POPULATE_READ``, Linux 5.14 or later; older kernels fault
pages in on first write, as before): paid before the service reports ready, and 1/512 of the
pool's bytes in page tables per worker. The pool's pages exist by then (pinned, or adopted),
and a read fault on a shared writable mapping maps them writable, 16 at a time (fault-around):
twice the rate of MADV_POPULATE_WRITE, with no fault on the writes that follow.

The workers end with the service, however it ends (SIGKILL included): left running, each would
keep every pool block mapped, the pool's memory held though its names are gone from /dev/shm.
Each watches a `gpu.lifeline.Lifeline` whose write end only the service holds and exits when
it closes; each is killed by the kernel should the forkserver die (``PR_SET_PDEATHSIG``; the
forkserver forks on its one thread); and the forkserver and multiprocessing's resource
tracker exit by themselves once every process holding their pipes has gone. The workers are
named ``pacer-synth`` (`gpu.lifeline.SYNTHESIS_PROCESS_NAME`), which ``pacer settle
--kill-orphans`` looks for.

>>> import numpy as np
>>> from gpu.pool import PinnedPool
>>> from gpu.synthesis import synthesize
>>> with PinnedPool(1, [(8,)] * 3, np.uint32, backend="shared") as pool, \\
...         ProcessSynthesizer(1) as synthesizer, pool.checkout() as slot:
...     synthesizer.fill(pool.slot_block(slot), seed=3, index=1)
...     bool((slot.arrays[2] == synthesize(3, 1, 3)[2]).all())
True
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import multiprocessing
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import Connection

from gpu import cpu_backend, lifeline
from gpu.babybear import BABYBEAR
from gpu.field import PrimeField
from gpu.lifeline import SYNTHESIS_PROCESS_NAME
from gpu.slots import SlotBlock
from gpu.synthesis import synthesize_into

__all__ = ["ProcessSynthesizer"]

logger = logging.getLogger("gpu.process_executor")


class ProcessSynthesizer:
    """``processes`` worker processes filling shared pool slots; `fill` blocks until done.

    Started with forkserver (the workers never touch CUDA, and a fork of a process holding a
    CUDA context is not safe to use). `start` launches them all, so none is forked on the hot
    path, and has each map the shared-memory ``blocks`` (paths: `gpu.pool.PinnedPool.block_paths`)
    with their page tables filled and, with ``backend="numba"``, load ``field``'s compiled
    kernel; `map_blocks` maps blocks made after the start; `close` stops them. A block not
    among them is mapped on its first fill in each worker.

    A worker that dies (the OOM killer, a signal) breaks the whole set: the syntheses in flight
    then start over once on a new set (``restarts`` counts them), instead of every later
    partition failing. The workers end when this process does, however it ends (see the
    module's docstring).
    """

    def __init__(
        self,
        processes: int,
        blocks: Sequence[str] = (),
        *,
        backend: str = "numpy",
        field: PrimeField | None = None,
    ) -> None:
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        cpu_backend.check(backend)
        self.processes = processes
        self.blocks = tuple(blocks)
        self.backend = backend
        self.field = field
        self.restarts = 0
        self._lock = threading.Lock()
        self._lifeline = lifeline.Lifeline.open()
        self._executor = self._new_executor()

    def _new_executor(self) -> ProcessPoolExecutor:
        context = multiprocessing.get_context("forkserver")
        return ProcessPoolExecutor(
            self.processes, mp_context=context, initializer=_tie_to_service,
            initargs=(self._lifeline.reader,),
        )  # fmt: skip

    def start(self) -> None:
        """Launch every worker process now (each imports NumPy once, and loads the compiled
        kernel) and map the blocks given at construction in each (`map_blocks`)."""
        began = time.monotonic()
        started = self._each_worker(self.blocks)
        logger.info(
            "synthesis processes (%s) end with this process (pid %d), however it ends: each "
            "exits when a pipe only this process holds open closes; %s; the forkserver and the "
            "resource tracker exit once they have",
            SYNTHESIS_PROCESS_NAME, os.getpid(),
            "each is killed should the forkserver die (PR_SET_PDEATHSIG)"
            if all(armed for _, armed in started)
            else "PR_SET_PDEATHSIG is not available here",
        )  # fmt: skip
        self._log_mapped(started, began)

    def map_blocks(self, blocks: Sequence[str]) -> None:
        """Have every worker map the shared-memory ``blocks`` (paths) with their page tables
        filled in: the pool's, once it is ready, when the workers were started before it."""
        began = time.monotonic()
        self.blocks = tuple(blocks)
        self._log_mapped(self._each_worker(self.blocks), began)

    def _each_worker(self, blocks: Sequence[str]) -> list[tuple[int, bool]]:
        """One mapping task per process, all submitted at once: each process takes one, as
        none is free before it has started. Should one take two, the second finds its blocks
        mapped and the process that got none maps each block on its first fill."""
        tasks = [
            self._executor.submit(_start_worker, blocks, self.backend, self.field)
            for _ in range(self.processes)
        ]
        return [task.result() for task in tasks]

    def _log_mapped(self, started: list[tuple[int, bool]], began: float) -> None:
        if not self.blocks:
            return
        populated = [size for size, _ in started]  # bytes each task populated
        # A page-table entry of 8 bytes for each 4 KiB page each process maps.
        logger.info(
            "%d synthesis processes ready in %.1f s; %d of them filled in the page tables "
            "of the pool's %d slot blocks (%.1f GiB): %.1f MiB of page tables in all",
            self.processes, time.monotonic() - began, sum(1 for size in populated if size),
            len(self.blocks), max(populated) / 2**30, sum(populated) / 512 / 2**20,
        )  # fmt: skip

    def fill(
        self, block: SlotBlock | None, seed: int, index: int, field: PrimeField = BABYBEAR
    ) -> None:
        """Write partition (seed, index) of ``field`` into the slot ``block`` describes, in a
        worker."""
        if block is None:
            raise ValueError("the slot is not in shared memory: synthesize it in this process")
        executor = self._executor
        try:
            executor.submit(_fill, block, seed, index, field, self.backend).result()
        except BrokenProcessPool:
            self._replace(executor)
            # The slot is written whole again; a second break is an error for the partition.
            self._executor.submit(_fill, block, seed, index, field, self.backend).result()

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        """A new set of workers for a broken one, once however many fills saw it break."""
        with self._lock:
            if self._executor is not broken:
                return
            broken.shutdown(wait=False, cancel_futures=True)
            self._executor = self._new_executor()
            self.restarts += 1
            logger.error(
                "a synthesis worker process died (killed, or out of memory?); started a new set "
                "of %d, and the syntheses it had start over (restart %d)",
                self.processes, self.restarts,
            )  # fmt: skip

    def close(self) -> None:
        """Stop the workers, then cut the lifeline (any worker left exits with it)."""
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._lifeline.cut()

    def __enter__(self) -> ProcessSynthesizer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# In each worker process: the blocks it has mapped, by path, and those whose page tables it
# filled in.
_mapped: dict[str, mmap.mmap] = {}
_populated: set[str] = set()

MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)
"""Fill in a mapping's page tables as reads would, without reading (Linux 5.14+)."""


_dies_with_forkserver = False


def _tie_to_service(lifeline_reader: Connection) -> None:
    """First thing in each worker: its name, and its end when the service or the forkserver
    (its parent, one thread) ends."""
    global _dies_with_forkserver
    lifeline.name_process(SYNTHESIS_PROCESS_NAME)
    _dies_with_forkserver = lifeline.die_with_parent()
    lifeline.watch(lifeline_reader)


def _start_worker(paths: Sequence[str], backend: str, field: PrimeField | None) -> tuple[int, bool]:
    """Map each block not yet mapped in this process and load the compiled kernel; the bytes
    whose page tables it filled in (0 where the kernel cannot), and whether the kernel kills
    this process should the forkserver die."""
    if backend == "numba" and field is not None:
        cpu_backend.warm(field)
    new = [path for path in paths if path not in _mapped]
    mappings = {path: _mapping(path) for path in new}
    populated = sum(len(mapping) for path, mapping in mappings.items() if path in _populated)
    return populated, _dies_with_forkserver


def _mapping(path: str) -> mmap.mmap:
    """This process's mapping of the shared block at ``path``, made (and populated) on first
    use: a file in /dev/shm, or the service's memfd under /proc/PID/fd.

    The block is the pool owner's: opened by path, not through `SharedMemory`, so no resource
    tracker here learns of it and none unlinks it when this process ends.
    """
    mapping = _mapped.get(path)
    if mapping is None:
        descriptor = os.open(path, os.O_RDWR)
        try:
            mapping = mmap.mmap(descriptor, os.fstat(descriptor).st_size)
        finally:
            os.close(descriptor)
        # An older kernel refuses: each page then faults in on its first write instead.
        with contextlib.suppress(OSError):
            mapping.madvise(MADV_POPULATE_READ)
            _populated.add(path)
        _mapped[path] = mapping
    return mapping


def _fill(block: SlotBlock, seed: int, index: int, field: PrimeField, backend: str) -> None:
    arrays = block.arrays(_mapping(block.path))
    synthesize_into(seed, index, arrays, field=field, backend=backend)
