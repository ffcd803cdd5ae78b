"""Named shared-memory blocks in /dev/shm: naming, creating and unlinking them, and removing
those a dead process left.

A shared pool's slots are such blocks (`gpu.allocators.SharedHostAllocator`), named
``pacer-pool-<pid>-<n>`` (`BLOCK_PREFIX`) so that a later start, or ``pacer settle``, can tell
whose they are (`block_owner`). This module imports no NumPy: ``pacer settle`` removes stale
blocks (`remove_stale_blocks`) and reads their names without it.

>>> block = create_block(4096)
>>> block_owner(block.name) == os.getpid()
True
>>> unlink_block(block)
"""

from __future__ import annotations

import itertools
import logging
import os
from multiprocessing import shared_memory

from gpu.sizes import format_bytes

__all__ = [
    "BLOCK_PREFIX",
    "SHM_DIR",
    "block_owner",
    "check_room",
    "create_block",
    "remove_stale_blocks",
    "unlink_block",
]

logger = logging.getLogger("gpu.shm_blocks")

SHM_DIR = "/dev/shm"
BLOCK_PREFIX = "pacer-pool-"
"""Names of shared slot blocks in /dev/shm: ``pacer-pool-<pid>-<n>``, so a later start can
tell whose they are."""
_block_numbers = itertools.count()
_live_blocks: set[str] = set()  # names this process created and has not unlinked


def create_block(nbytes: int) -> shared_memory.SharedMemory:
    """A new block of ``nbytes`` named for this process (sparse until written)."""
    name = f"{BLOCK_PREFIX}{os.getpid()}-{next(_block_numbers)}"
    block = shared_memory.SharedMemory(name=name, create=True, size=nbytes)
    _live_blocks.add(name)
    return block


def unlink_block(block: shared_memory.SharedMemory) -> None:
    """Close this process's mapping of ``block`` and remove its name; mappings still held
    elsewhere (or by arrays here) stay valid until dropped."""
    try:
        block.close()
    except BufferError:
        # A slot still checked out: its arrays keep the mapping until they are dropped. The
        # block object lets go of it, or its __del__ would retry the close and print this
        # error again.
        block._buf = block._mmap = None  # type: ignore[attr-defined]
    block.unlink()
    _live_blocks.discard(block.name)


def check_room(total_bytes: int) -> None:
    """Refuse blocks of ``total_bytes`` in all that do not fit in /dev/shm now, once blocks
    that a dead process left there are gone (`remove_stale_blocks`). Blocks are sparse until
    written, and a write past the tmpfs limit is a SIGBUS, so this is checked before any
    block."""
    remove_stale_blocks()
    stats = os.statvfs(SHM_DIR)
    room = stats.f_bavail * stats.f_frsize
    if total_bytes > room:
        raise RuntimeError(
            f"shared-memory pool slots need {format_bytes(total_bytes)} in {SHM_DIR}, which "
            f"has {format_bytes(room)} free; enlarge it (e.g. docker --shm-size, a "
            "Kubernetes emptyDir with medium Memory), lower the slot count, or synthesize on "
            "threads instead (PACER_SYNTHESIS__EXECUTOR=threads: pinned without /dev/shm, "
            "synthesis slower)"
        )


def remove_stale_blocks(directory: str | None = None) -> tuple[int, int]:
    """Unlink the slot blocks of processes that are gone; returns (blocks, bytes) removed.

    A service killed outright (SIGKILL, the OOM killer) never unlinks its blocks, and tmpfs
    keeps them, GiB each, until someone does. A block is stale when the process in its name
    has exited, or is this one (a restarted container's PID 1) but did not make it. Blocks of
    a live process (another service on this host) are left alone.
    """
    directory = directory or SHM_DIR
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0, 0
    removed: dict[int, list[int]] = {}  # pid: sizes of its blocks removed
    for name in sorted(names):
        pid = block_owner(name)
        if pid is None:
            continue
        mine = pid == os.getpid()
        if (mine and name in _live_blocks) or (not mine and _process_alive(pid)):
            continue
        path = os.path.join(directory, name)
        try:
            size = os.stat(path).st_blocks * 512  # what it holds, not its sparse length
            os.unlink(path)
        except FileNotFoundError:
            continue  # removed meanwhile
        except OSError as error:  # another user's (a run as root?): say so, go on
            logger.warning("cannot remove stale shared slot block %s: %s", path, error)
            continue
        removed.setdefault(pid, []).append(size)
    for pid, sizes in removed.items():
        logger.warning(
            "removed %d shared slot blocks (%s) from %s that process %d left when it died",
            len(sizes), format_bytes(sum(sizes)), directory, pid,
        )  # fmt: skip
    return sum(map(len, removed.values())), sum(map(sum, removed.values()))


def block_owner(name: str) -> int | None:
    """The PID of the process that made slot block ``name``; None for a name not of that form.

    >>> block_owner("pacer-pool-4242-7"), block_owner("pacer-pool-x-7"), block_owner("other")
    (4242, None, None)
    """
    pid_text, _, number = name.removeprefix(BLOCK_PREFIX).partition("-")
    if not name.startswith(BLOCK_PREFIX) or not (pid_text.isdigit() and number.isdigit()):
        return None
    return int(pid_text)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
