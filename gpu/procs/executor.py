"""Synthesis in worker processes that write straight into shared pool slots.

Threads of one process share the GIL: each NumPy call a synthesis makes (thousands a partition)
gives it up and takes it back, and with many threads, or a busy event loop, taking it back
waits. Worker processes each have their own. A `ProcessSynthesizer` keeps a pool of them; each
maps the pool's shared-memory blocks by path (once per block) and runs
`gpu.reference.synthesis.synthesize_into` on the slot it is told, so only a slot reference crosses
the
process boundary and the buffers are written once, in place, where the GPU copies them from.

Each worker fills in its page tables for every block of the pool, paid once
(`gpu.procs.worker_blocks`): when it starts for blocks given then, and for any other when it first
writes into it; none while a pool is being pinned, which they would slow.

The workers end with the service, however it ends (SIGKILL included): left running, each would
keep every pool block mapped, the pool's memory held though its names are gone from /dev/shm.
Each watches a `gpu.procs.lifeline.Lifeline` whose write end only the service holds and exits when
it closes; each is killed by the kernel should the forkserver die (``PR_SET_PDEATHSIG``; the
forkserver forks on its one thread); and the forkserver and multiprocessing's resource
tracker exit by themselves once every process holding their pipes has gone. The workers are
named ``pacer-synth`` (`gpu.procs.lifeline.SYNTHESIS_PROCESS_NAME`), which ``pacer settle
--kill-orphans`` looks for.

A synthesis that never returns (its worker stopped, stuck or looping) would keep its worker and
its slot for good: `ProcessSynthesizer.cancel` kills the worker running it, found in the table of
fills the workers share (`gpu.procs.fill_table`), and the set is replaced as for any worker that
dies;
a fill cancelled before a worker began it is never begun.

>>> import numpy as np
>>> from gpu.pool.pinned import PinnedPool
>>> from gpu.reference.synthesis import synthesize
>>> with PinnedPool.build(1, [(8,)] * 3, np.uint32, backend="shared") as pool, \\
...         ProcessSynthesizer(1) as synthesizer, pool.checkout() as slot:
...     synthesizer.fill(pool.slot_block(slot), seed=3, index=1)
...     bool((slot.arrays[2] == synthesize(3, 1, 3)[2]).all())
True
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import Connection

from gpu.field.babybear import BABYBEAR
from gpu.field.prime import PrimeField
from gpu.pool.slots import SlotBlock
from gpu.procs import lifeline
from gpu.procs import preload as synthesis_preload
from gpu.procs.fill_table import FillTable
from gpu.procs.lifeline import SYNTHESIS_PROCESS_NAME
from gpu.procs.worker_blocks import map_blocks, mapping
from gpu.reference import cpu_backend
from gpu.reference.synthesis import synthesize_into

__all__ = ["ProcessSynthesizer", "SynthesisCancelled"]

logger = logging.getLogger("gpu.procs.executor")


class SynthesisCancelled(Exception):  # noqa: N818 - a domain name, like PoolExhausted
    """A fill was cancelled (`ProcessSynthesizer.cancel`): its worker was killed, or no worker
    began it; the slot holds nothing to use."""

    def __init__(self, token: int, partition: str) -> None:
        super().__init__(f"the synthesis of partition {partition or token} was cancelled")
        self.token = token
        self.partition = partition


class ProcessSynthesizer:
    """``processes`` worker processes filling shared pool slots; `fill` blocks until done.

    Started with forkserver (the workers never touch CUDA, and a fork of a process holding a
    CUDA context is not safe to use); with ``backend="numba"`` the forkserver loads ``field``'s
    compiled kernel before its first fork (`gpu.procs.preload`). `start` launches them
    all, so none is forked on the hot path, and has each map the shared-memory ``blocks`` (paths:
    `gpu.pool.pinned.PinnedPool.block_paths`) with their page tables filled and, with
    ``backend="numba"``, load ``field``'s compiled kernel (already there when forked from a
    preloaded forkserver); `close` stops them. A block not among them is mapped on its first
    fill in each worker.

    A worker that dies (the OOM killer, a signal) breaks the whole set: the syntheses in flight
    then start over once on a new set (``restarts`` counts them), instead of every later
    partition failing. A fill that must not go on (abandoned past its time limit) is stopped by
    `cancel`, whenever it comes: each fill runs under a ``token`` (`token`), and each worker
    records in a table shared with this process (`gpu.procs.fill_table`) which fill it runs, and
    reads there whether it is cancelled before it begins it. The workers end when this process
    does, however it ends (see the module's docstring).
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
        self._table = FillTable.create()
        self._tokens = itertools.count(1)
        self._live: dict[int, str] = {}  # token → partition, from `token` until its fill is done
        self._cancelled: set[int] = set()  # of those
        self._executor = self._new_executor()

    def _new_executor(self) -> ProcessPoolExecutor:
        context = multiprocessing.get_context("forkserver")
        if self.backend == "numba":
            # The forkserver loads the compiled kernels once and every worker is forked with
            # them (`gpu.procs.preload`); no effect on a forkserver already running.
            context.set_forkserver_preload(["__main__", synthesis_preload.module_for(self.field)])
        return ProcessPoolExecutor(
            self.processes, mp_context=context, initializer=_start_process,
            initargs=(self._lifeline.reader, self._table.path),
        )  # fmt: skip

    def start(self) -> None:
        """Launch every worker process now (each imports NumPy once, and loads the compiled
        kernel) and map the blocks given at construction in each; any other block a worker
        maps when it first writes into it."""
        began = time.monotonic()
        started = [task.result() for task in self._each_worker(self.blocks)]
        logger.info(
            "synthesis processes (%s) end with this process (pid %d), however it ends: each "
            "exits when a pipe only this process holds open closes; %s; the forkserver and the "
            "resource tracker exit once they have",
            SYNTHESIS_PROCESS_NAME, os.getpid(),
            "each is killed should the forkserver die (PR_SET_PDEATHSIG)"
            if all(armed for _, armed in started)
            else "PR_SET_PDEATHSIG is not available here",
        )  # fmt: skip
        if self.blocks:
            populated = [size for size, _ in started]
            logger.info(
                "%d synthesis processes ready in %.1f s; %d of them filled in the page tables of "
                "the pool's %d slot blocks (%.1f GiB): %.1f MiB of page tables in all",
                self.processes, time.monotonic() - began, sum(1 for size in populated if size),
                len(self.blocks), max(populated) / 2**30, sum(populated) / 512 / 2**20,
            )  # fmt: skip

    def _each_worker(self, blocks: Sequence[str]) -> list[Future[tuple[int, bool]]]:
        """One mapping task per process, all submitted at once: each process takes one, as
        none is free before it has started. Should one take two, the second finds its blocks
        mapped and the process that got none maps each block on its first fill."""
        return [
            self._executor.submit(_start_worker, blocks, self.backend, self.field)
            for _ in range(self.processes)
        ]

    def token(self, partition: str = "") -> int:
        """A token for one `fill` (``partition`` names it, in the log and to `token_of`):
        `cancel` stops that fill from now on, before it is asked for as well as while it runs.
        The fill ends the token (each token is for one)."""
        with self._lock:
            token = next(self._tokens)
            self._live[token] = partition
        return token

    def fill(
        self, block: SlotBlock | None, seed: int, index: int, field: PrimeField = BABYBEAR,
        token: int | None = None,
    ) -> None:  # fmt: skip
        """Write partition (seed, index) of ``field`` into the slot ``block`` describes, in a
        worker, under ``token`` (one of its own where None); `SynthesisCancelled` where
        `cancel` stopped it, whenever that was: none begins it after, and one running it is
        killed."""
        if block is None:
            raise ValueError("the slot is not in shared memory: synthesize it in this process")
        token = self.token() if token is None else token
        with self._lock:
            if token not in self._live:
                raise ValueError(f"token {token} was not taken (token) or its fill has run")
            partition = self._live[token]
        try:
            for attempt in (1, 2):
                with self._lock:
                    if token in self._cancelled:
                        break  # cancelled before it was sent to a worker, or before it went again
                    executor = self._executor
                try:
                    executor.submit(_fill, block, seed, index, field, self.backend,
                                    token).result()  # fmt: skip
                    break
                except BrokenProcessPool:
                    self._replace(executor)
                    # The slot is written whole again on the new set, but for a cancelled
                    # fill; a second break is an error for the partition.
                    if attempt == 2 and token not in self._cancelled:
                        raise
        finally:
            with self._lock:
                del self._live[token]
                cancelled = token in self._cancelled
                self._cancelled.discard(token)
        if cancelled:
            raise SynthesisCancelled(token, partition)

    def token_of(self, partition: str) -> int | None:
        """The token of the fill of ``partition`` (as `token` was told it) neither done nor
        cancelled, the newest where there are several; None where there is none."""
        with self._lock:
            tokens = [
                token
                for token, named in self._live.items()
                if named == partition and token not in self._cancelled
            ]
        return max(tokens, default=None)

    def worker_of(self, token: int) -> int | None:
        """The PID of the worker process running fill ``token`` now; None where none is."""
        pid = self._table.worker(token)
        # A worker gone may have left its record, and its PID may name another process now.
        if pid is None or pid not in (self._executor._processes or {}):
            return None
        return pid

    def cancel(self, token: int) -> int | None:
        """Stop fill ``token``, taken (`token`) and not done: it raises `SynthesisCancelled`
        instead of starting over. A worker running it is killed with SIGKILL, which breaks the
        set (replaced as when any worker dies; other fills in flight start over); a worker
        that has not begun it does not (`gpu.procs.fill_table`). The killed worker's PID; None where
        no worker runs it, or where it is done or cancelled already."""
        with self._lock:
            if token not in self._live or token in self._cancelled:
                return None
            self._cancelled.add(token)
            partition = self._live[token]
            # Marked first, the record read second: a worker that records the fill after this
            # read sees the mark and does not begin it; one that recorded it before is killed.
            self._table.cancel(token)
            pid = self.worker_of(token)
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):  # it died meanwhile
                    os.kill(pid, signal.SIGKILL)
        logger.error(
            "the synthesis of partition %s was cancelled: %s",
            partition or token,
            "no worker process is running it, and none will begin it" if pid is None else
            f"killed its worker process (pid {pid}); a new set of {self.processes} replaces it",
        )  # fmt: skip
        return pid

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
        self._table.close()

    def __enter__(self) -> ProcessSynthesizer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_dies_with_forkserver = False
_table: FillTable | None = None  # the table of fills, in a worker


def _start_process(lifeline_reader: Connection, table_path: str) -> None:
    """First thing in each worker: tied to the service, and the table of fills opened."""
    global _table
    _tie_to_service(lifeline_reader)
    _table = FillTable.open(table_path)


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
    return map_blocks(paths), _dies_with_forkserver


def _fill(
    block: SlotBlock, seed: int, index: int, field: PrimeField, backend: str, token: int
) -> None:
    """Fill the slot, this process recorded against fill ``token`` in the table meanwhile;
    nothing where the fill was cancelled before this process took it (its caller knows)."""
    table = _table
    if table is None:
        raise RuntimeError("a fill runs in a worker process, whose initializer opens the table")
    if table.cancelled(token):
        return  # skipped: no kill can come for it, and this worker takes the next fill
    table.record(token)
    _end_if_cancelled(table, token)
    try:
        arrays = block.arrays(mapping(block.path))
        synthesize_into(seed, index, arrays, field=field, backend=backend)
    finally:
        table.clear(token)
        _end_if_cancelled(table, token)


def _end_if_cancelled(table: FillTable, token: int) -> None:
    """End this process where fill ``token`` is cancelled now that this process has recorded
    it: the service may have seen the record and be killing this process, or may not; it cannot
    tell which, and must take no other fill that a late kill would end (`gpu.procs.fill_table`). The
    set is replaced as when the service kills a worker; the fill raises `SynthesisCancelled`."""
    if table.cancelled(token):
        os.kill(os.getpid(), signal.SIGKILL)
