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

A pool being pinned is mapped block by block: `start` with a `BlockReadiness` (the pool
allocator's `gpu.allocators.BlockWatcher`) has each worker, once started, map every block as
soon as the pinning threads are done with it, beside the pinning of the rest, and never one
before: a flag per block in a small memfd says which are ready. Each maps on a thread of the
lowest CPU priority: the pinning, which start-up waits for, keeps the cores it needs, and the
mapping takes what is left. (On a fresh virtual machine
the workers' page tables are memory the host backs on first touch, which made their mapping
after the pool take as long again as the pinning: bench/RESULTS.md.)

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
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from gpu import cpu_backend, lifeline
from gpu.babybear import BABYBEAR
from gpu.field import PrimeField
from gpu.lifeline import SYNTHESIS_PROCESS_NAME
from gpu.slots import SlotBlock
from gpu.synthesis import synthesize_into

__all__ = ["BlockReadiness", "ProcessSynthesizer"]

logger = logging.getLogger("gpu.process_executor")
T = TypeVar("T")

PRELOAD_MODULE = "gpu.synthesis_preload"
"""What the forkserver imports before forking workers of compiled synthesis: the kernels."""


class ProcessSynthesizer:
    """``processes`` worker processes filling shared pool slots; `fill` blocks until done.

    Started with forkserver (the workers never touch CUDA, and a fork of a process holding a
    CUDA context is not safe to use); with ``backend="numba"`` the forkserver loads the
    compiled kernels before its first fork (`PRELOAD_MODULE`). `start` launches them all, so
    none is forked on the hot path, and has each map the shared-memory ``blocks`` (paths:
    `gpu.pool.PinnedPool.block_paths`) with their page tables filled and, with
    ``backend="numba"``, load ``field``'s compiled kernel (already there when forked from a
    preloaded forkserver); with a `BlockReadiness`, each then maps a pool's blocks as they
    are pinned (`map_ready` waits for that); `close` stops them. A block not among them is
    mapped on its first fill in each worker.

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
        if self.backend == "numba":
            # The forkserver loads the compiled kernels once and every worker is forked with
            # them (`gpu.synthesis_preload`); no effect on a forkserver already running.
            context.set_forkserver_preload(["__main__", PRELOAD_MODULE])
        return ProcessPoolExecutor(
            self.processes, mp_context=context, initializer=_tie_to_service,
            initargs=(self._lifeline.reader,),
        )  # fmt: skip

    def start(self, readiness: BlockReadiness | None = None) -> None:
        """Launch every worker process now (each imports NumPy once, and loads the compiled
        kernel) and map the blocks given at construction in each; with
        ``readiness``, then have each map a pool's blocks as they become ready
        (`BlockReadiness.wait` waits for that)."""
        began = time.monotonic()
        starting = self._each_worker(self.blocks)
        if readiness is not None:  # queued behind the starts: one each
            readiness.submit(self._executor, self.processes)
        started = [task.result() for task in starting]
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

    def map_ready(self, readiness: BlockReadiness) -> None:
        """Wait until every worker has mapped every block of ``readiness`` (given to `start`):
        after the pool, only what its pinning did not hide."""
        began = time.monotonic()
        mapped = readiness.wait()
        self.blocks = readiness.paths
        self._log_mapped(mapped, began)

    def _each_worker(self, blocks: Sequence[str]) -> list[Future[tuple[int, bool]]]:
        """One mapping task per process, all submitted at once: each process takes one, as
        none is free before it has started. Should one take two, the second finds its blocks
        mapped and the process that got none maps each block on its first fill."""
        return [
            self._executor.submit(_start_worker, blocks, self.backend, self.field)
            for _ in range(self.processes)
        ]

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


class BlockReadiness:
    """A pool's blocks as they become ready, for every synthesis worker to map each then:
    the pool allocator's `gpu.allocators.BlockWatcher`, handed to `ProcessSynthesizer.start`.

    `blocks_made` (the allocator) creates a memfd of one flag per block and a last one that
    says stop; `block_ready` sets a block's flag; the workers poll the flags every
    ``poll_s`` and map (and populate) each block whose flag is set. `wait` returns once every
    worker has mapped every block; `abandon` (a pool that failed) has them stop waiting.
    """

    def __init__(self, poll_s: float = 0.005) -> None:
        self.poll_s = poll_s
        self.paths: tuple[str, ...] = ()
        self._made = threading.Event()
        self._flags: mmap.mmap | None = None
        self._fd: int | None = None
        self._tasks: list[Future[tuple[int, bool]]] = []
        self._began = time.monotonic()

    def blocks_made(self, paths: Sequence[str]) -> None:
        self._fd = os.memfd_create("pacer-pool-ready", os.MFD_CLOEXEC)
        os.ftruncate(self._fd, len(paths) + 1)
        self._flags = mmap.mmap(self._fd, len(paths) + 1)
        self.paths = tuple(paths)
        self._made.set()

    def block_ready(self, index: int) -> None:
        if self._flags is None:
            raise RuntimeError("blocks_made first: no block is known yet")
        self._flags[index] = 1

    def abandon(self) -> None:
        """No more blocks will be ready: the workers stop waiting (the pool failed, or has no
        shared blocks)."""
        if self._flags is not None:
            self._flags[len(self.paths)] = 1
        self._made.set()

    def __enter__(self) -> BlockReadiness:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """The pool is built, or failed: without blocks (failed, or none shared) the workers
        stop waiting."""
        if exc_info[0] is not None or not self.paths:
            self.abandon()

    def submit(self, executor: ProcessPoolExecutor, processes: int) -> None:
        """Once the blocks exist, one mapping task per worker: each waits for the blocks, so
        no worker takes two while another is starting."""
        self._made.wait()
        if self._fd is None:
            return  # abandoned before any block was made
        flags = f"/proc/{os.getpid()}/fd/{self._fd}"
        self._tasks = [
            executor.submit(_map_when_ready, self.paths, flags, self.poll_s)
            for _ in range(processes)
        ]

    def wait(self) -> list[tuple[int, bool]]:
        """Each worker's bytes populated once every block is mapped in each; the flags go."""
        try:
            return [task.result() for task in self._tasks]
        finally:
            if self._flags is not None:
                self._flags.close()
            if self._fd is not None:
                os.close(self._fd)
            self._flags = self._fd = None


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


LOWEST_PRIORITY = 19
"""The nice value of a worker's thread mapping a pool beside its pinning."""


def _at_lowest_priority(call: Callable[..., T], *args: Any) -> T:
    """``call(*args)`` on a thread of this process at the lowest CPU priority: the page tables
    it fills in are this process's all the same, while the process's own thread keeps its
    priority for the syntheses that follow (an unprivileged process cannot raise its priority
    back once lowered; a thread's ends with the thread)."""

    def lowered() -> None:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST_PRIORITY)

    with ThreadPoolExecutor(1, thread_name_prefix="map", initializer=lowered) as thread:
        return thread.submit(call, *args).result()


def _map_when_ready(paths: Sequence[str], flags_path: str, poll_s: float) -> tuple[int, bool]:
    """Map each of ``paths`` as soon as its flag in the memfd at ``flags_path`` is set, until
    all are mapped or the last flag (stop) is; the bytes whose page tables it filled in. Done
    at the lowest priority (`_at_lowest_priority`): the workers' mapping only follows the
    pinning, block by block, and sixteen of them at the same priority as the pinning threads
    took the cores the pinning needs, which start-up waits for."""
    return _at_lowest_priority(_map_flagged, paths, flags_path, poll_s)


def _map_flagged(paths: Sequence[str], flags_path: str, poll_s: float) -> tuple[int, bool]:
    descriptor = os.open(flags_path, os.O_RDONLY)
    try:
        flags = mmap.mmap(descriptor, len(paths) + 1, prot=mmap.PROT_READ)
    finally:
        os.close(descriptor)
    populated = 0
    with flags:
        waiting = [index for index, path in enumerate(paths) if path not in _mapped]
        while waiting and not flags[len(paths)]:
            ready = [index for index in waiting if flags[index]]
            for index in ready:
                mapping = _mapping(paths[index])
                populated += len(mapping) if paths[index] in _populated else 0
            waiting = [index for index in waiting if index not in ready]
            if waiting and not ready:
                time.sleep(poll_s)
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
