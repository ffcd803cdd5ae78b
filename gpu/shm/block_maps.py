"""Which processes map a pool's blocks, read from /proc/PID/maps. Imports no NumPy.

Unlinking a block removes its name, but its pages stay while any process maps it.
``pacer settle`` uses `scan` to find processes that outlived their pacer and still map its
blocks, by name. A pacer adopting a predecessor's blocks uses `processes_mapping` to wait until
no other process maps them, by inode (a memfd block has no name).

>>> line = "7f00-7f10 rw-s 00000000 00:1b 42 /dev/shm/pacer-pool-7-0 (deleted)"
>>> list(block_mappings(line))
[BlockMapping(start='7f00', inode=('00:1b', 42), name='pacer-pool-7-0', owner=7, unlinked=True)]
>>> list(block_mappings(line, directory="/dev/shm/pacer"))  # another directory's blocks only
[]
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import NamedTuple

from gpu.shm.blocks import BLOCK_PREFIX, SHM_DIR, block_owner

__all__ = ["BlockMapping", "block_mappings", "maps_inode", "processes_mapping", "scan"]

PROC = Path("/proc")


class BlockMapping(NamedTuple):
    """One mapping of a named pool block in a process."""

    start: str  # the address, as maps and smaps write it
    inode: tuple[str, int]  # (device as maps writes it, inode): one block however many map it
    name: str
    owner: int  # the PID in its name
    unlinked: bool  # its name is gone from its directory


def maps_inode(device: int, inode: int) -> tuple[str, int]:
    """Return (device, inode) as /proc/PID/maps writes them, from `os.stat`'s st_dev and st_ino."""
    return f"{os.major(device):02x}:{os.minor(device):02x}", inode


def block_mappings(
    maps: str, prefix: str = BLOCK_PREFIX, directory: str = SHM_DIR
) -> Iterator[BlockMapping]:
    """Yield the mappings in ``maps`` text of blocks in ``directory`` named with ``prefix``."""
    directory = os.path.normpath(directory)
    marker = f"{directory}/{prefix}"
    for line in maps.splitlines():
        if marker not in line:
            continue
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[4].isdigit():
            continue
        path = parts[5]
        unlinked = path.endswith(" (deleted)")
        folder, _, name = path.removesuffix(" (deleted)").rpartition("/")
        owner = block_owner(name)
        if folder == directory and owner is not None and name.startswith(prefix):
            start = parts[0].partition("-")[0]
            yield BlockMapping(start, (parts[3], int(parts[4])), name, owner, unlinked)


def scan(
    proc: Path = PROC, prefix: str = BLOCK_PREFIX, directory: str = SHM_DIR
) -> tuple[dict[int, list[BlockMapping]], set[int]]:
    """Each process's mappings of blocks in ``directory`` named with ``prefix``, by PID.

    Also returns the PIDs whose maps could not be read (another user's processes).
    """
    mapped: dict[int, list[BlockMapping]] = {}
    unreadable: set[int] = set()
    for pid, text in _maps(proc):
        if text is None:
            unreadable.add(pid)
            continue
        found = list(block_mappings(text, prefix, directory))
        if found:
            mapped[pid] = found
    return mapped, unreadable


def processes_mapping(
    inodes: Collection[tuple[str, int]], proc: Path = PROC, skip: Collection[int] = ()
) -> dict[int, int]:
    """Map each PID that maps any of ``inodes`` to how many it maps; PIDs in ``skip`` are left out.

    Another user's processes cannot be read, so they are not seen.
    """
    wanted = set(inodes)
    found: dict[int, int] = {}
    for pid, text in _maps(proc):
        if text is None or pid in skip:
            continue
        held = set()
        for line in text.splitlines():
            parts = line.split(None, 5)
            if len(parts) >= 5 and parts[4].isdigit() and (parts[3], int(parts[4])) in wanted:
                held.add((parts[3], int(parts[4])))
        if held:
            found[pid] = len(held)
    return found


def _maps(proc: Path) -> Iterator[tuple[int, str | None]]:
    """Yield (PID, maps text or None where unreadable) for every process still there."""
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            yield int(entry.name), (entry / "maps").read_text(errors="replace")
        except PermissionError:
            yield int(entry.name), None
        except OSError:  # gone meanwhile
            continue
