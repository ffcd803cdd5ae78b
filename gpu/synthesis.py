"""Synthesis in worker processes that write straight into shared pool slots.

Threads of one process share the GIL: each NumPy call a synthesis makes (thousands a partition)
gives it up and takes it back, and with many threads, or a busy event loop, taking it back
waits. Worker processes each have their own. A `ProcessSynthesizer` keeps a pool of them; each
maps the pool's shared-memory blocks by name (once per block) and runs
`gpu.ntt.synthesize_into` on the slot it is told, so only a slot reference crosses the process
boundary and the buffers are written once, in place, where the GPU copies them from.

>>> import numpy as np
>>> from gpu.pool import PinnedPool
>>> with PinnedPool(1, [(8,)] * 3, np.uint32, backend="shared") as pool, \\
...         ProcessSynthesizer(1) as synthesizer, pool.checkout() as slot:
...     synthesizer.fill(pool.slot_block(slot), seed=3, index=1)
...     bool((slot.arrays[2] == ntt.synthesize(3, 1, 3)[2]).all())
True
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import shared_memory
from types import TracebackType
from typing import Any

from gpu import ntt
from gpu.babybear import BABYBEAR
from gpu.field import PrimeField
from gpu.pool import SlotBlock

__all__ = ["ProcessSynthesizer"]

logger = logging.getLogger("gpu.synthesis")


class ProcessSynthesizer:
    """``processes`` worker processes filling shared pool slots; `fill` blocks until done.

    Started with forkserver (the workers never touch CUDA, and a fork of a process holding a
    CUDA context is not safe to use). `start` launches them all, so none is forked on the hot
    path; `close` stops them.

    A worker that dies (the OOM killer, a signal) breaks the whole set: the syntheses in flight
    then start over once on a new set (``restarts`` counts them), instead of every later
    partition failing.
    """

    def __init__(self, processes: int) -> None:
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        self.processes = processes
        self.restarts = 0
        self._lock = threading.Lock()
        self._executor = self._new_executor()

    def _new_executor(self) -> ProcessPoolExecutor:
        context = multiprocessing.get_context("forkserver")
        return ProcessPoolExecutor(self.processes, mp_context=context)

    def start(self) -> None:
        """Launch every worker process now (each imports NumPy once)."""
        for future in [self._executor.submit(_ready) for _ in range(self.processes)]:
            future.result()

    def fill(
        self, block: SlotBlock | None, seed: int, index: int, field: PrimeField = BABYBEAR
    ) -> None:
        """Write partition (seed, index) of ``field`` into the slot ``block`` describes, in a
        worker."""
        if block is None:
            raise ValueError("the slot is not in shared memory: synthesize it in this process")
        executor = self._executor
        try:
            executor.submit(_fill, block, seed, index, field).result()
        except BrokenProcessPool:
            self._replace(executor)
            # The slot is written whole again; a second break is an error for the partition.
            self._executor.submit(_fill, block, seed, index, field).result()

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
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> ProcessSynthesizer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# In each worker process: the blocks it has mapped, by name.
_mapped: dict[str, shared_memory.SharedMemory] = {}


def _ready() -> bool:
    return True


def _fill(block: SlotBlock, seed: int, index: int, field: PrimeField) -> None:
    memory = _mapped.get(block.name)
    if memory is None:
        # Registered with the resource tracker this process shares with its parent (forkserver
        # children inherit it), which already knows the block: nothing to undo here.
        memory = _mapped[block.name] = shared_memory.SharedMemory(name=block.name)
    ntt.synthesize_into(seed, index, _arrays(block, memory), field=field)


def _arrays(block: SlotBlock, memory: shared_memory.SharedMemory) -> tuple[Any, ...]:
    assert memory.buf is not None
    return block.arrays(memory.buf)
