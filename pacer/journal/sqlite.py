"""The journal in an SQLite file: `SqliteJournal`, what the service runs on.

Used from one thread (the journal's own, in the service). The file is in WAL mode with
``synchronous=FULL``: every write method has committed, and fsynced, before it returns. Only
partitions that finished have a row; a partition without one is pending, so adding a job of a
million partitions writes one row, and a page of partitions reads at most a page of rows.

`SqliteJournal` holds the file's connection, and the core that writes (`JournalCore`) and
reads (`JournalQueries`) through a `SqliteDialect`; `schema` opens the file at the current
version.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar, Self

from pacer.journal.on_core import CoreJournal
from pacer.journal.records import JobRecord, JournalFileError, PartitionResult
from pacer.journal.schema import connect, transaction
from pacer.journal.sqlite_dialect import SqliteDialect
from pacer.journal.sqlite_results import complete_partitions

BUSY_TIMEOUT_S = 5.0


class JournalFileGoneError(JournalFileError, sqlite3.OperationalError):
    """The journal's path no longer names the file that was opened (deleted, or replaced):
    what is written now would not be read by the next start. An ``OperationalError``: the
    service waits it out as any fault of the file (the file may be put back)."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(
            path,
            f"journal file {path} was {problem} while open: results are kept in memory; put the "
            "file back, or restart pacer (the partitions not committed are proved again)",
        )
        self.problem = problem


def _identity(path: Path) -> tuple[int, int]:
    """(device, inode) of the file at ``path``."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


class SqliteJournal(CoreJournal):
    """The service's job journal in the SQLite file at ``path`` (created if missing).

    ``clock`` gives wall-clock seconds for ``created_at``/``updated_at`` and retention. Every
    write is one transaction, durable when the method returns. A write waits up to
    ``busy_timeout_s`` for another connection's lock, then raises ``sqlite3.OperationalError``
    (database is locked). Use it from one thread. Each method's contract is in
    `JournalBackend`.

    >>> with SqliteJournal(path) as journal:
    ...     job = journal.add_job(4, "sha-chain", {"depth": 20})
    """

    Error: ClassVar[type[Exception]] = sqlite3.Error
    OperationalError: ClassVar[type[Exception]] = sqlite3.OperationalError

    def __init__(
        self,
        path: Path,
        clock: Callable[[], float] = time.time,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        if not busy_timeout_s >= 0:
            raise ValueError(f"busy_timeout_s must be >= 0, got {busy_timeout_s!r}")
        self.path = Path(path)
        self._db = connect(path, busy_timeout_s)
        try:
            self._identity = _identity(self.path)
        except BaseException:
            self._db.close()
            raise
        self._dialect = SqliteDialect(self._db, clock, self._transaction)
        super().__init__(self._dialect)

    def complete_partitions(self, items: Iterable[PartitionResult]) -> list[JobRecord]:
        """Journal proved partitions at once, all or none; the jobs this completed
        (`pacer.journal.sqlite_results`)."""
        return complete_partitions(self._dialect, items)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction on the file: every write of this journal opens it here. The
        file is checked (`check_file`) before the commit, so that no write is acknowledged
        to a file the next start would not read: it is rolled back instead."""
        with transaction(self._db) as db:
            yield db
            self._check_identity()

    # -- the file -----------------------------------------------------------------------------
    def check_file(self) -> None:
        """Raise ``JournalFileGoneError`` if the path no longer names the file that was opened: it
        was deleted, or replaced by another file. One ``stat``; a file moved away and back is
        fine again."""
        self._check_identity()

    def _check_identity(self) -> None:
        try:
            identity = _identity(self.path)
        except FileNotFoundError:
            raise JournalFileGoneError(self.path, "deleted or moved away") from None
        if identity != self._identity:
            raise JournalFileGoneError(self.path, "replaced by another file")

    def probe(self) -> None:
        """Commit a write that changes nothing (the header's user version, rewritten): raises
        as any write would while the file cannot take one (locked, read-only, I/O errors)."""
        with self._transaction() as db:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            db.execute(f"PRAGMA user_version = {version}")

    def close(self) -> None:
        """Close the file; later calls raise ``sqlite3.ProgrammingError``. Idempotent."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
