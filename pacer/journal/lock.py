"""One service per journal file: `JournalLock` holds a lock on the journal file itself while a
service runs, whatever name (a hard link, a symlink) leads to it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from pathlib import Path

from pacer.journal.records import JournalFileError

PROC_LOCKS = Path("/proc/locks")
# Created for the owner only: the journal holds every job's parameters. SQLite gives the -wal
# and -shm files the database file's mode.
JOURNAL_MODE = 0o600


class JournalInUseError(JournalFileError):
    """Another process holds the journal file's lock: a second service on one file would prove
    its jobs twice. ``holder`` names it (``pid 1234 on host-a``) where the kernel says."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(
            path,
            f"journal {path} is in use by {holder}, which holds the file's lock (under this "
            "name or another: a hard link or a symlink): stop that pacer, or give this one "
            "another journal file",
        )
        self.holder = holder


class JournalLock:
    """An exclusive ``flock`` on the journal file at ``path`` (created, mode 0600, if missing).

    The lock is on the file, not on its name: a hard link, a symlink or a bind mount of one
    journal all lead to the one lock. Nothing is written: the holder is found in
    ``/proc/locks`` for the refusal. flock belongs to the open file and is separate from the
    POSIX locks SQLite takes; but closing any descriptor of the file drops this process's
    POSIX locks on it, so the service opens the lock before SQLite opens the file and releases
    it after SQLite has closed it. The kernel drops the lock when the process ends, SIGKILL
    included: a restart after a crash is never blocked.

    >>> lock = JournalLock(path)
    >>> lock.acquire()  # JournalInUseError, naming the holder, if another process has it
    >>> lock.release()
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or raise ``JournalInUseError`` at once if another holder has it.
        Read-only: a journal on a read-only filesystem is locked, then refused by SQLite."""
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, JOURNAL_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lock_holder(os.fstat(fd)) or f"a process on {socket.gethostname()}"
            os.close(fd)
            raise JournalInUseError(self.path, holder) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        """Give the lock up (closing the file releases it). Idempotent."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def create_journal_file(path: Path) -> None:
    """Create the journal file at ``path``, empty (an empty SQLite database) with mode 0600,
    if it is missing. An existing file is not opened: closing a descriptor of a file SQLite
    has open in this process would drop SQLite's locks on it."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, JOURNAL_MODE))


def held_by(path: Path) -> str | None:
    """Who holds the lock of the journal at ``path`` (`lock_holder`), without opening the file:
    a probe that leaves the locks of this process's own SQLite connections to it alone."""
    try:
        return lock_holder(os.stat(path))
    except FileNotFoundError:
        return None


def lock_holder(st: os.stat_result, proc_locks: Path = PROC_LOCKS) -> str | None:
    """Who holds a flock on the file ``st`` describes, as ``/proc/locks`` tells: ``pid N on
    HOST`` (flock is the host's own); None where it names none."""
    try:
        lines = proc_locks.read_text().splitlines()
    except OSError:
        lines = []
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    same_inode = []
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4021 fd:01:1234 0 EOF"; a waiter's line has "->" second.
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[3] != "WRITE":
            continue
        where = fields[5].rpartition(":")
        if where[2] == str(st.st_ino):
            same_inode.append((where[0] == device, fields[4]))
    same_inode.sort(reverse=True)  # the device's own first (some filesystems report another)
    if not same_inode:
        return None
    pid = same_inode[0][1]
    return f"pid {pid} on {socket.gethostname()}" if pid.isdigit() and pid != "0" else (
        f"a process on {socket.gethostname()}"
    )  # fmt: skip
