"""Synthesis in worker processes that write straight into shared pool slots.

Threads of one process share the GIL, and a synthesis gives it up thousands of times a
partition. Worker processes each have their own (docs/decisions/gpu.md, D103). A
`ProcessSynthesizer` keeps a set of them. Each worker maps the pool's shared blocks by path and
runs `gpu.reference.synthesis.synthesize_into` on the slot it is told. Only a slot reference
crosses the process boundary; the buffers are written once, in place.

Each worker fills in its page tables for a block once, never while the pool is being pinned
(`gpu.procs.worker_blocks`).

The workers end with the service, however it ends, even by SIGKILL (D104). Each watches a
`gpu.procs.lifeline.Lifeline` and is killed if the forkserver dies. They are named
``pacer-synth`` (`gpu.procs.lifeline.SYNTHESIS_PROCESS_NAME`) for ``pacer settle --kill-orphans``.

`ProcessSynthesizer.cancel` kills the worker running a synthesis that never returns, and the
set is replaced. A fill cancelled before a worker began it is never begun
(`gpu.procs.fill_table`).

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
    """A fill was cancelled (`ProcessSynthesizer.cancel`); the slot holds nothing to use."""

    def __init__(self, token: int, partition: str) -> None:
        super().__init__(f"the synthesis of partition {partition or token} was cancelled")
        self.token = token
        self.partition = partition


class ProcessSynthesizer:
    """``processes`` worker processes that fill shared pool slots; `fill` blocks until done.

    Workers come from a forkserver, because forking a process that holds a CUDA context is unsafe.
    With ``backend="numba"``, the forkserver loads ``field``'s compiled kernel before its first fork
    (`gpu.procs.preload`).

    `start` launches every worker, so none is forked on the hot path. Each maps the shared-memory
    ``blocks`` (`gpu.pool.pinned.PinnedPool.block_paths`) and fills in their page tables. A block
    not among them is mapped on its first fill. `close` stops the workers.

    If a worker dies (the OOM killer, a signal), the whole set breaks. The fills in flight start
    over once on a new set; ``restarts`` counts them. `cancel` stops a fill at any moment: each fill
    runs under a `token`, and the workers share a table of tokens with this process
    (`gpu.procs.fill_table`).
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
        """Launch every worker now and map the blocks given at construction in each.

        Each worker imports NumPy once and loads the compiled kernel. Other blocks are mapped on
        first write.
        """
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
        """Submit one mapping task per process, all at once, so each process takes one.

        If a process takes two, the second finds its blocks mapped. The process that got none maps
        each block on its first fill.
        """
        return [
            self._executor.submit(_start_worker, blocks, self.backend, self.field)
            for _ in range(self.processes)
        ]

    def token(self, partition: str = "") -> int:
        """Return a token for one `fill`; ``partition`` names it in the log and for `token_of`.

        `cancel` stops that fill from then on, whether it has started or not. The fill ends the
        token.
        """
        with self._lock:
            token = next(self._tokens)
            self._live[token] = partition
        return token

    def fill(
        self, block: SlotBlock | None, seed: int, index: int, field: PrimeField = BABYBEAR,
        token: int | None = None,
    ) -> None:  # fmt: skip
        """In a worker, write partition (seed, index) of ``field`` into the slot of ``block``.

        The fill runs under ``token``, or a new one if None. Raises `SynthesisCancelled` if `cancel`
        stopped it: no worker begins it after that, and a worker running it is killed.
        """
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
        """The newest token for ``partition`` neither done nor cancelled; None if none."""
        with self._lock:
            tokens = [
                token
                for token, named in self._live.items()
                if named == partition and token not in self._cancelled
            ]
        return max(tokens, default=None)

    def worker_of(self, token: int) -> int | None:
        """The PID of the worker running fill ``token`` now; None if none is."""
        pid = self._table.worker(token)
        # A worker gone may have left its record, and its PID may name another process now.
        if pid is None or pid not in (self._executor._processes or {}):
            return None
        return pid

    def cancel(self, token: int) -> int | None:
        """Stop fill ``token``; it raises `SynthesisCancelled` instead of starting over.

        A worker running the fill is killed with SIGKILL. The set is then replaced as when any
        worker dies, and other fills in flight start over. A worker that has not begun the fill
        never will. Returns the killed worker's PID, or None if no worker ran it or it was done or
        cancelled.
        """
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
        """Replace a broken set of workers, once however many fills saw it break."""
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
    """Run first in each worker: tie it to the service and open the table of fills."""
    global _table
    _tie_to_service(lifeline_reader)
    _table = FillTable.open(table_path)


def _tie_to_service(lifeline_reader: Connection) -> None:
    """Name this worker, and make it end when the service or the forkserver ends."""
    global _dies_with_forkserver
    lifeline.name_process(SYNTHESIS_PROCESS_NAME)
    _dies_with_forkserver = lifeline.die_with_parent()
    lifeline.watch(lifeline_reader)


def _start_worker(paths: Sequence[str], backend: str, field: PrimeField | None) -> tuple[int, bool]:
    """Map each block not yet mapped here and load the compiled kernel.

    Returns the bytes whose page tables were filled in (0 where the kernel cannot), and whether the
    kernel will kill this process if the forkserver dies.
    """
    if backend == "numba" and field is not None:
        cpu_backend.warm(field)
    return map_blocks(paths), _dies_with_forkserver


def _fill(
    block: SlotBlock, seed: int, index: int, field: PrimeField, backend: str, token: int
) -> None:
    """Fill the slot while this process is recorded against fill ``token`` in the table.

    Does nothing if the fill was cancelled before this process took it; the caller knows.
    """
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
    """End this process if fill ``token`` is cancelled now that this process has recorded it.

    The service may be killing this process, or may not, and it cannot tell which. So it must not
    take another fill that a late kill would end. The set is replaced, and the fill raises
    `SynthesisCancelled` (docs/decisions/hangs.md, D118).
    """
    if table.cancelled(token):
        os.kill(os.getpid(), signal.SIGKILL)
