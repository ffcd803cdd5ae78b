"""A pool's shared blocks as a synthesis worker process maps them: each block once, when the
worker first writes into it.

A process's first write to each 4 KiB page of a mapping it did not create is a page fault: for
a 3 GiB slot, 786,432 of them, which made synthesis about half as slow again until every worker
had written every slot, minutes into a run. A worker therefore fills in its page tables for a
block when it maps it (``MADV_POPULATE_READ``, Linux 5.14 or later; older kernels fault pages
in on first write, as before): 1/512 of the block's bytes in page tables per worker. The pool's
pages exist by then (pinned, or adopted), and a read fault on a shared writable mapping maps
them writable, 16 at a time (fault-around): twice the rate of MADV_POPULATE_WRITE, with no
fault on the writes that follow.

No worker maps a block while the pool is being pinned: sixteen workers filling in their page
tables beside the pinning slowed it by a sixth on an H200 host, and the start waits for the
pinning (bench/RESULTS.md). Each block costs a worker its mapping once, at its first synthesis
into it (a tenth of a second or so for 3 GiB), at the worker's own priority.

The functions without a leading underscore run in the worker processes.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
from collections.abc import Sequence

from gpu.pool.allocators import MADV_POPULATE_READ, populate

__all__ = ["MADV_POPULATE_READ", "map_blocks", "mapping"]

# In each worker process: the blocks it has mapped, by path; a lock that makes each block's
# mapping once, though two threads want it.
_mapped: dict[str, mmap.mmap] = {}
_making = threading.Lock()


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
    return made, _populate(made)


def _populate(made: mmap.mmap) -> int:
    """Fill in this process's page tables for ``made``; the bytes, or 0 where the kernel
    cannot (each page then faults in on its first write). Through libc, without the GIL
    (mmap.madvise holds it)."""
    view = (ctypes.c_char * len(made)).from_buffer(made)
    try:
        if not populate(ctypes.addressof(view), len(made), existing=True):
            return 0
    finally:
        del view  # the buffer let go of, so the mapping can close
    return len(made)


def map_blocks(paths: Sequence[str]) -> int:
    """Map each of ``paths`` not yet mapped here; the bytes whose page tables it filled in (0
    where the kernel cannot)."""
    return sum(_map_new(path) for path in paths)


def _map_new(path: str) -> int:
    """Map ``path`` unless mapped already; the bytes populated by this call."""
    return _mapping_made(path)[1]
