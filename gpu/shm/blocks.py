"""The blocks a shared pool's slots live in: make, open, rename and remove them.

A block is a file in a tmpfs directory (`SHM_DIR` unless another is given), or a memfd that a
service manager can keep. Blocks are named ``pacer-pool-<pid>-<n>`` (`BLOCK_PREFIX`) for the
process that holds them, so a later start or ``pacer settle`` can tell whose they are
(`block_owner`). A block kept for the next pacer is renamed for the pacer that adopts it.

This module imports no NumPy, because ``pacer settle`` uses it.

>>> block = create_block(4096)
>>> block_owner(block.name) == os.getpid(), block.path == f"{SHM_DIR}/{block.name}"
(True, True)
>>> block.unlink()
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import mmap
import os
from collections.abc import Collection
from multiprocessing import resource_tracker

from gpu.shm import identity
from gpu.sizes import format_bytes

__all__ = [
    "BLOCK_PREFIX",
    "SHM_DIR",
    "HostBlock",
    "NoRoomError",
    "block_owner",
    "check_room",
    "create_block",
    "open_block",
    "process_alive",
    "remove_stale_blocks",
]

logger = logging.getLogger("gpu.shm.blocks")

SHM_DIR = "/dev/shm"
"""Where blocks and owner records go unless a directory is given: the host's tmpfs for shared
memory, and the one directory whose blocks multiprocessing's resource tracker can remove."""
BLOCK_PREFIX = "pacer-pool-"
"""Names of shared slot blocks: ``pacer-pool-<pid>-<n>``, for the process that holds them."""
_block_numbers = itertools.count()
_live_blocks: set[tuple[str, str]] = set()  # (directory, name) this process holds, not let go of


def _live(directory: str, name: str) -> tuple[str, str]:
    """The key `_live_blocks` uses: one name in two directories is two blocks."""
    return os.path.normpath(directory), name


def _unmark_if_none_left(directory: str) -> None:
    """Remove this process's owner file from ``directory`` once it holds no block there."""
    where = os.path.normpath(directory)
    if not any(held == where for held, _ in _live_blocks):
        identity.unmark_owner(directory)


class HostBlock:
    """One slot's memory, mapped here: a file in ``directory``, or a memfd (``fd``, no name).

    ``path`` is where another process on this host opens it: the file, or this process's descriptor
    under /proc. With ``tracked``, multiprocessing's resource tracker unlinks the file if this
    process dies first. The tracker only works in `SHM_DIR`; blocks elsewhere wait for the next
    start's sweep, or ``pacer settle``'s.
    """

    def __init__(
        self,
        name: str,
        size: int,
        mapping: mmap.mmap,
        *,
        directory: str | None = SHM_DIR,
        fd: int | None = None,
        tracked: bool = False,
    ) -> None:
        if (directory is None) == (fd is None):
            raise ValueError("a block is either a file in a directory or a memfd, not both")
        self.name = name
        self.size = size
        self.directory = directory
        self.fd = fd
        self.tracked = tracked
        self._memfd = fd is not None
        self._mapping: mmap.mmap | None = mapping

    @property
    def memfd(self) -> bool:
        return self._memfd

    @property
    def path(self) -> str:
        if self.fd is not None:
            return f"/proc/{os.getpid()}/fd/{self.fd}"
        return f"{self.directory}/{self.name}"

    @property
    def mapping(self) -> mmap.mmap:
        if self._mapping is None:
            raise ValueError(f"block {self.name} is closed")
        return self._mapping

    def inode(self) -> tuple[int, int]:
        """(device, inode) of the block, as /proc/PID/maps shows it."""
        stat = os.fstat(self.fd) if self.fd is not None else os.stat(self.path)
        return stat.st_dev, stat.st_ino

    @property
    def trackable(self) -> bool:
        """Whether the resource tracker can remove the file (only in `SHM_DIR`)."""
        directory = self.directory
        return directory is not None and os.path.normpath(directory) == SHM_DIR

    def track(self) -> None:
        """Have the resource tracker remove the file if this process dies first (`SHM_DIR` only)."""
        if not self.tracked and self.trackable:
            resource_tracker.register(f"/{self.name}", "shared_memory")
            self.tracked = True

    def untrack(self) -> None:
        """Take the file off the resource tracker, so it outlives this process."""
        if self.tracked:
            resource_tracker.unregister(f"/{self.name}", "shared_memory")
            self.tracked = False

    def rename(self, name: str) -> None:
        """Give the file a new name in its directory (a memfd's name cannot change)."""
        if self.directory is None or name == self.name:
            return
        os.rename(self.path, f"{self.directory}/{name}")
        _live_blocks.discard(_live(self.directory, self.name))
        self.name = name
        _live_blocks.add(_live(self.directory, name))

    def close(self) -> None:
        """Unmap the block here and close its descriptor; the block itself stays.

        Arrays that still hold the mapping (a slot checked out) keep it until they are dropped.
        """
        mapping, self._mapping = self._mapping, None
        if mapping is not None:
            # Arrays still referring to it keep the mapping; it goes when they do.
            with contextlib.suppress(BufferError):
                mapping.close()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def unlink(self) -> None:
        """Close the block and remove its name; its memory goes once no process maps it."""
        self.close()
        if self.directory is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.directory}/{self.name}")
            if self.tracked:
                self.untrack()
            _live_blocks.discard(_live(self.directory, self.name))
            _unmark_if_none_left(self.directory)

    def __repr__(self) -> str:
        where = "memfd" if self.memfd else self.directory
        return f"<HostBlock {self.name} ({where}), {format_bytes(self.size)}>"


def next_name(directory: str = SHM_DIR) -> str:
    """A block name for this process that no file in ``directory`` has yet."""
    while True:
        name = f"{BLOCK_PREFIX}{os.getpid()}-{next(_block_numbers)}"
        if not os.path.exists(f"{directory}/{name}"):
            return name


def create_block(
    nbytes: int, *, memfd: bool = False, tracked: bool = False, directory: str = SHM_DIR
) -> HostBlock:
    """Make a block of ``nbytes`` named for this process and map it here; raise OSError on failure.

    The block is a file in ``directory`` (a tmpfs), or a memfd with ``memfd``. It is sparse until
    written. ``tracked`` registers a file in `SHM_DIR` with the resource tracker.
    """
    name = next_name(directory)
    if memfd:
        descriptor = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            mapping = _sized_mapping(descriptor, nbytes)
        except BaseException:
            os.close(descriptor)
            raise
        return HostBlock(name, nbytes, mapping, directory=None, fd=descriptor)
    path = f"{directory}/{name}"
    identity.mark_owner(directory)  # who made it, by more than the PID in its name
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        mapping = _sized_mapping(descriptor, nbytes)
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(descriptor)
    _live_blocks.add(_live(directory, name))
    block = HostBlock(name, nbytes, mapping, directory=directory)
    if tracked:
        block.track()
    return block


def _sized_mapping(descriptor: int, nbytes: int) -> mmap.mmap:
    os.ftruncate(descriptor, nbytes)
    return mmap.mmap(descriptor, nbytes)


def open_block(name: str, *, fd: int | None = None, directory: str = SHM_DIR) -> HostBlock:
    """Map an existing block: file ``name`` in ``directory``, or memfd ``fd``.

    The block takes over ``fd``. Raises OSError when it cannot be opened.
    """
    if fd is not None:
        return HostBlock(name, os.fstat(fd).st_size, mmap.mmap(fd, 0), directory=None, fd=fd)
    descriptor = os.open(f"{directory}/{name}", os.O_RDWR)
    try:
        size = os.fstat(descriptor).st_size
        mapping = mmap.mmap(descriptor, size)
    finally:
        os.close(descriptor)
    _live_blocks.add(_live(directory, name))
    return HostBlock(name, size, mapping, directory=directory)


class NoRoomError(RuntimeError):
    """Blocks of ``needed_bytes`` do not fit in ``directory``, which has ``free_bytes`` free."""

    def __init__(self, needed_bytes: int, free_bytes: int, directory: str) -> None:
        self.needed_bytes = needed_bytes
        self.free_bytes = free_bytes
        self.directory = directory
        super().__init__(
            f"shared-memory pool slots need {format_bytes(needed_bytes)} in {directory}, which "
            f"has {format_bytes(free_bytes)} free; enlarge it (e.g. docker --shm-size, a "
            "Kubernetes emptyDir with medium Memory) or lower the slot count"
        )


def check_room(total_bytes: int, directory: str = SHM_DIR) -> None:
    """Raise `NoRoomError` if blocks of ``total_bytes`` do not fit in ``directory`` now.

    Blocks are sparse, and a write past the tmpfs limit is a SIGBUS, so check before making any.
    Remove stale blocks first (`gpu.shm.record.sweep`). Raises RuntimeError if ``directory`` is
    missing.
    """
    try:
        stats = os.statvfs(directory)
    except FileNotFoundError:
        raise RuntimeError(
            f"the directory for shared-memory pool slots, {directory}, does not exist: create "
            "it (a tmpfs such as /dev/shm, or a directory in one)"
        ) from None
    room = stats.f_bavail * stats.f_frsize
    if total_bytes > room:
        raise NoRoomError(total_bytes, room, directory)


def remove_stale_blocks(directory: str = SHM_DIR, keep: Collection[str] = ()) -> tuple[int, int]:
    """Unlink the slot blocks of processes that are gone; return (blocks, bytes) removed.

    A service killed outright never unlinks its blocks, and tmpfs keeps them. A block is stale when
    its pacer has exited, or is this process but did not make it (a restarted container's PID 1).
    Where the pacer left an owner file, its identity says whether it runs (`identity.owner_alive`:
    in any PID namespace, whoever has its PID now); else the PID alone. Blocks in ``keep`` and
    blocks of live pacers are left alone; owner files of pacers gone are removed.
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0, 0
    owners = identity.owner_files(directory)
    alive: dict[int, bool] = {}
    removed: dict[int, list[int]] = {}  # pid: sizes of its blocks removed
    for name in sorted(names):
        pid = block_owner(name)
        if pid is None or name in keep:
            continue
        mine = pid == os.getpid()
        if mine and _live(directory, name) in _live_blocks:
            continue
        if not mine and alive.setdefault(pid, _pacer_alive(pid, owners)):
            continue
        size = remove_file(os.path.join(directory, name))
        if size is not None:
            removed.setdefault(pid, []).append(size)
    for pid, files in owners.items():
        if pid != os.getpid() and not alive.setdefault(pid, _pacer_alive(pid, owners)):
            for path, _ in files:
                remove_file(path)
    _unmark_if_none_left(directory)
    for pid, sizes in removed.items():
        logger.warning(
            "removed %d shared slot blocks (%s) from %s that process %d left when it died",
            len(sizes), format_bytes(sum(sizes)), directory, pid,
        )  # fmt: skip
    return sum(map(len, removed.values())), sum(map(sum, removed.values()))


def _pacer_alive(
    pid: int, owners: dict[int, list[tuple[str, identity.ProcessIdentity | None]]]
) -> bool:
    """Whether the pacer whose blocks name ``pid`` runs: by its owner files, else its PID."""
    by_identity = identity.owner_alive(pid, owners)
    return process_alive(pid) if by_identity is None else by_identity


def remove_file(path: str) -> int | None:
    """Unlink ``path``; return the bytes it held, or None if it was gone or stayed (logged)."""
    try:
        size = os.stat(path).st_blocks * 512
        os.unlink(path)
    except FileNotFoundError:
        return None  # removed meanwhile
    except OSError as error:  # another user's (a run as root?): say so, go on
        logger.warning("cannot remove stale shared slot block %s: %s", path, error)
        return None
    return size


def block_owner(name: str) -> int | None:
    """The PID in slot block ``name``; None for a name not of that form.

    >>> block_owner("pacer-pool-4242-7"), block_owner("pacer-pool-x-7"), block_owner("other")
    (4242, None, None)
    """
    pid_text, _, number = name.removeprefix(BLOCK_PREFIX).partition("-")
    if not name.startswith(BLOCK_PREFIX) or not (pid_text.isdigit() and number.isdigit()):
        return None
    return int(pid_text)


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a zombie counts until it is reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
