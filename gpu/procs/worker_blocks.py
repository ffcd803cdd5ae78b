"""A pool's shared blocks as a synthesis worker maps them: each block once, at its first write.

A first write to each page of a mapping is a page fault, which made synthesis much slower until
every worker had touched every slot. So a worker fills in its page tables when it maps a block
(``MADV_POPULATE_READ``, Linux 5.14 or later). The pages exist by then, so a read fault maps
them writable, 16 at a time.

No worker maps a block while the pool is being pinned, because it slows the pinning that the
start waits for (docs/decisions/gpu.md, D103). The functions without a leading underscore run in
the worker processes.
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
    """This process's mapping of the shared block at ``path``, made and populated on first use.

    ``path`` is a file in /dev/shm or the service's memfd under /proc/PID/fd. It is opened by path,
    not through `SharedMemory`, so no resource tracker here unlinks it when this process ends.
    """
    return _mapping_made(path)[0]


def _mapping_made(path: str) -> tuple[mmap.mmap, int]:
    """The mapping of ``path``, and the bytes this call populated (0 if none)."""
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
    """Fill in page tables for ``made`` through libc, without the GIL; return the bytes.

    Returns 0 where the kernel cannot; each page then faults in on its first write.
    """
    view = (ctypes.c_char * len(made)).from_buffer(made)
    try:
        if not populate(ctypes.addressof(view), len(made), existing=True):
            return 0
    finally:
        del view  # the buffer let go of, so the mapping can close
    return len(made)


def map_blocks(paths: Sequence[str]) -> int:
    """Map each of ``paths`` not yet mapped here; return the bytes populated."""
    return sum(_map_new(path) for path in paths)


def _map_new(path: str) -> int:
    """Map ``path`` unless mapped already; return the bytes populated by this call."""
    return _mapping_made(path)[1]
