"""A pool's shared blocks as a synthesis worker process maps them, and `BlockReadiness`, which
has every worker map a pool being pinned block by block.

A process's first write to each 4 KiB page of a mapping it did not create is a page fault: for
a 3 GiB slot, 786,432 of them, which made synthesis about half as slow again until every worker
had written every slot, minutes into a run. A worker therefore fills in its page tables for a
block when it maps it (``MADV_POPULATE_READ``, Linux 5.14 or later; older kernels fault pages
in on first write, as before): 1/512 of the block's bytes in page tables per worker. The pool's
pages exist by then (pinned, or adopted), and a read fault on a shared writable mapping maps
them writable, 16 at a time (fault-around): twice the rate of MADV_POPULATE_WRITE, with no
fault on the writes that follow.

A pool being pinned is mapped block by block: with a `BlockReadiness` (the pool allocator's
`gpu.allocators.BlockWatcher`), each worker, once started, maps every block as soon as the
pinning threads are done with it, and never one before: a flag per block in a small memfd
says which are ready. It maps on a thread of its own at the lowest CPU priority
(`LOWEST_PRIORITY`): the pinning keeps the cores it needs, and the mapping takes what is left.
The worker's task returns once the whole pool is pinned, and its mapping thread stops
there (after the block it is on, which a synthesis that wants it meanwhile writes at once):
a synthesis into a block not yet mapped in its worker maps that block first, at the
worker's own priority (each block mapped once, though two threads want it). Sixteen
workers' page tables for a 63 GiB pool took 2.5 to 5 s after the pinning on an H200 host:
the service no longer waits for them before it is ready, and each block costs a worker its
mapping once, when it first writes it (bench/RESULTS.md).

The functions without a leading underscore run in the worker processes.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor

from gpu.allocators import populate

__all__ = [
    "LOWEST_PRIORITY",
    "MADV_POPULATE_READ",
    "BlockReadiness",
    "map_blocks",
    "map_while_pinned",
    "mapping",
]

MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)
"""Fill in a mapping's page tables as reads would, without reading (Linux 5.14+)."""
LOWEST_PRIORITY = 19
"""The nice value of a worker's thread mapping a pool beside its pinning."""

# In each worker process: the blocks it has mapped, by path, and those whose page tables it
# filled in; a lock that makes each block's mapping once, though two threads want it.
_mapped: dict[str, mmap.mmap] = {}
_populated: set[str] = set()
_making = threading.Lock()
_mapping_thread: threading.Thread | None = None


def mapping(path: str) -> mmap.mmap:
    """This process's mapping of the shared block at ``path``, made (and populated) on first
    use: a file in /dev/shm, or the service's memfd under /proc/PID/fd.

    The block is the pool owner's: opened by path, not through `SharedMemory`, so no resource
    tracker here learns of it and none unlinks it when this process ends.
    """
    return _mapping_made(path)[0]


def _mapping_made(path: str) -> tuple[mmap.mmap, int]:
    """The mapping of ``path``, and the bytes this call populated (0 where it was mapped
    already, or where the kernel cannot)."""
    made = _mapped.get(path)
    if made is not None:
        return made, 0
    with _making:  # an mmap call: quick
        made = _mapped.get(path)
        if made is not None:
            return made, 0
        descriptor = os.open(path, os.O_RDWR)
        try:
            made = mmap.mmap(descriptor, os.fstat(descriptor).st_size)
        finally:
            os.close(descriptor)
        _mapped[path] = made
    # Outside the lock: a synthesis that wants this block while a mapping thread of the lowest
    # priority populates it writes at once (its first writes fault), instead of waiting for a
    # thread the syntheses themselves starve.
    return made, _populate(path, made)


def _populate(path: str, made: mmap.mmap) -> int:
    """Fill in this process's page tables for ``made``; the bytes, or 0 where the kernel
    cannot (each page then faults in on its first write). Through libc, without the GIL
    (mmap.madvise holds it): a thread starved inside the call holds up no other."""
    view = (ctypes.c_char * len(made)).from_buffer(made)
    try:
        if not populate(ctypes.addressof(view), len(made), existing=True):
            return 0
    finally:
        del view  # the buffer let go of, so the mapping can close
    _populated.add(path)
    return len(made)


def map_blocks(paths: Sequence[str]) -> int:
    """Map each of ``paths`` not yet mapped here; the bytes whose page tables it filled in (0
    where the kernel cannot)."""
    return sum(_map_new(path) for path in paths)


def _map_new(path: str) -> int:
    """Map ``path`` unless mapped already; the bytes populated by this call."""
    return _mapping_made(path)[1]


class _Mapped:
    """Bytes a mapping thread has populated so far (one writer)."""

    bytes = 0


def map_while_pinned(paths: Sequence[str], flags_path: str, poll_s: float) -> int:
    """Have a thread of this process, at the lowest priority, map each of ``paths`` once its
    flag in the memfd at ``flags_path`` is set (and stop at the last flag); return once every
    flag is set, with the bytes it has populated by then. The thread stops then, after the
    block it is mapping; what is left a synthesis maps when it first needs it. One such
    thread a process."""
    global _mapping_thread
    descriptor = os.open(flags_path, os.O_RDONLY)
    try:
        flags = mmap.mmap(descriptor, len(paths) + 1, prot=mmap.PROT_READ)
    finally:
        os.close(descriptor)
    done = _Mapped()
    pinned = threading.Event()
    if _mapping_thread is None or not _mapping_thread.is_alive():
        _mapping_thread = threading.Thread(
            target=_map_flagged, args=(paths, flags, poll_s, done, pinned), name="map-pool",
            daemon=True,
        )  # fmt: skip
        _mapping_thread.start()
    while not flags[len(paths)] and not all(flags[: len(paths)]):
        time.sleep(poll_s)
    pinned.set()
    return done.bytes


def _map_flagged(
    paths: Sequence[str], flags: mmap.mmap, poll_s: float, done: _Mapped, pinned: threading.Event
) -> None:
    """Map each flagged block, at the lowest priority, until the pool is ``pinned``: after
    that a starved thread would only hold a block's lock that a synthesis at full priority
    waits for, so the syntheses map what is left, each block as one first needs it."""
    with contextlib.suppress(OSError):  # lowering one's own priority is always allowed
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST_PRIORITY)
    waiting = [index for index, path in enumerate(paths) if path not in _mapped]
    while waiting and not flags[len(paths)] and not pinned.is_set():
        ready = [index for index in waiting if flags[index]]
        for index in ready:
            if pinned.is_set():
                return
            done.bytes += _map_new(paths[index])
        waiting = [index for index in waiting if index not in ready]
        if waiting and not ready:
            time.sleep(poll_s)


class BlockReadiness:
    """A pool's blocks as they become ready, for every synthesis worker to map each then:
    the pool allocator's `gpu.allocators.BlockWatcher`, handed to
    `gpu.process_executor.ProcessSynthesizer.start`.

    `blocks_made` (the allocator) creates a memfd of one flag per block and a last one that
    says stop; `block_ready` sets a block's flag; each worker's mapping thread polls the flags
    every ``poll_s`` and maps (and populates) each block whose flag is set (`map_while_pinned`).
    `wait` returns once every block is ready, with the bytes each worker had populated by then;
    `abandon` (a pool that failed) has them stop.
    """

    def __init__(self, poll_s: float = 0.005) -> None:
        self.poll_s = poll_s
        self.paths: tuple[str, ...] = ()
        self._made = threading.Event()
        self._flags: mmap.mmap | None = None
        self._fd: int | None = None
        self._tasks: list[Future[int]] = []

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
        """Once the blocks exist, one mapping task per worker: each lasts until the pool is
        pinned, so no worker takes two while another is starting."""
        self._made.wait()
        if self._fd is None:
            return  # abandoned before any block was made
        flags = f"/proc/{os.getpid()}/fd/{self._fd}"
        self._tasks = [
            executor.submit(map_while_pinned, self.paths, flags, self.poll_s)
            for _ in range(processes)
        ]

    def wait(self) -> list[int]:
        """Each worker's bytes populated by the time every block is ready; the flags go here
        (each worker keeps its own mapping of them)."""
        try:
            return [task.result() for task in self._tasks]
        finally:
            if self._flags is not None:
                self._flags.close()
            if self._fd is not None:
                os.close(self._fd)
            self._flags = self._fd = None
