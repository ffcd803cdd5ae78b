"""One service per journal file: `JournalLock` holds ``<journal>.lock`` while a service runs."""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from pacer.journal.records import JournalFileError


class JournalInUseError(JournalFileError):
    """Another process holds the journal's lock: a second service on one file would prove its
    jobs twice. ``holder`` is what the holder wrote into the lock file (its pid and host)."""

    def __init__(self, path: Path, lock_path: Path, holder: str) -> None:
        super().__init__(
            path,
            f"journal {path} is in use by {holder} (it holds {lock_path}): stop that pacer, "
            "or give this one another journal file",
        )
        self.lock_path = lock_path
        self.holder = holder


class JournalLock:
    """An exclusive lock on the journal at ``path``: ``flock`` on ``<path>.lock`` beside it,
    which names the holder (``pid 1234 on host-a``).

    A lock file of its own, not the database: SQLite takes POSIX (fcntl) byte-range locks on the
    database, and those are per process, so closing any descriptor of the file would drop a
    second one taken on it. flock belongs to the open file, and the kernel releases it when the
    process ends, SIGKILL included: a restart after a crash is never blocked. The file stays (a
    lock file unlinked on exit would let a third process lock a new file while a second still
    holds the old one).

    >>> lock = JournalLock(path)
    >>> lock.acquire()  # JournalInUseError, naming the holder, if another process has it
    >>> lock.release()
    """

    def __init__(self, path: Path) -> None:
        self.journal_path = Path(path)
        self.path = self.journal_path.with_name(self.journal_path.name + ".lock")
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or raise ``JournalInUseError`` at once if another holder has it."""
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip()
            os.close(fd)
            raise JournalInUseError(
                self.journal_path, self.path, holder or "a process that has not named itself yet"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Give the lock up (closing the file releases it). Idempotent."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
