"""The SQLite journal's own: its file, lock, schema versions and process deaths. What every
backend holds to is in test_contract."""

from __future__ import annotations

import math
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import IO, Any

import pytest

from pacer.journal import (
    SCHEMA_VERSION,
    JobState,
    Journal,
    JournalFileGoneError,
    JournalInUseError,
    JournalLock,
    NewerSchemaError,
    PartitionResult,
    PartitionSummary,
)
from pacer.journal.lock import held_by, lock_holder
from tests.conftest import FakeClock
from tests.journal.stores import current, proved

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "journal.sqlite"


@pytest.fixture
def journal(path: Path, clock: FakeClock) -> Iterator[Journal]:
    with Journal(path, clock) as journal:
        yield journal


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"index": -1}, "index must be an integer >= 0"),
        ({"digest": ""}, "digest must be a non-empty string without spaces"),
        ({"digest": "a b"}, "digest must be a non-empty string without spaces"),
        ({"synthesis_s": -1.0}, "synthesis_s must be a finite number of seconds >= 0"),
        ({"gpu_s": math.inf}, "gpu_s must be a finite number of seconds >= 0"),
        ({"phases": {"msm": math.nan}}, "phases\\['msm'\\] must be a finite number"),
        ({"gpu": -1}, "gpu must be a GPU index >= 0 or None"),
    ],
    ids=["index", "empty-digest", "spaced-digest", "synthesis", "gpu-time", "phase", "gpu"],
)
def test_partition_result_refuses_invalid_fields(kwargs: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {"job_id": "j", "index": 0, "digest": "d", "synthesis_s": 1.0}
    with pytest.raises(ValueError, match=message):
        PartitionResult(**({**fields, "gpu_s": 1.0} | kwargs))


def test_a_journal_with_a_newer_schema_is_refused(path: Path) -> None:
    with closing(sqlite3.connect(path)) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(
        NewerSchemaError,
        match=f"schema version {SCHEMA_VERSION + 1}; this pacer reads up to version "
        f"{SCHEMA_VERSION}",
    ):
        Journal(path)


# The schema of version 1 as pacer wrote it, to test the upgrade of an existing file.
VERSION_1 = """
CREATE TABLE jobs (
    seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, state TEXT NOT NULL,
    partitions INTEGER NOT NULL, partitions_done INTEGER NOT NULL, workload TEXT,
    params TEXT NOT NULL, priority INTEGER NOT NULL, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, error TEXT, result_digest TEXT);
CREATE INDEX jobs_by_state ON jobs (state, created_at, seq);
CREATE INDEX jobs_by_age ON jobs (created_at, seq);
CREATE INDEX jobs_by_update ON jobs (state, updated_at);
CREATE TABLE partitions (
    job_id TEXT NOT NULL, idx INTEGER NOT NULL, state TEXT NOT NULL, synthesis_s REAL,
    gpu_s REAL, phases TEXT NOT NULL, digest TEXT, error TEXT, gpu INTEGER,
    completed_at REAL NOT NULL, PRIMARY KEY (job_id, idx)) WITHOUT ROWID;
CREATE TABLE estimates (id INTEGER PRIMARY KEY CHECK (id = 1), estimates TEXT NOT NULL);
INSERT INTO jobs VALUES (1, 'aaaaaaaaaaaaaaaa', 'running', 3, 1, 'ntt', '{}', 0, 1.0, 2.0,
    NULL, NULL);
INSERT INTO partitions VALUES ('aaaaaaaaaaaaaaaa', 1, 'completed', 3.0, 0.5, '{}', 'd1', NULL,
    0, 2.0);
INSERT INTO estimates VALUES (1, '{"gpu_service_s": 1.5}');
PRAGMA user_version = 1;
"""


def test_a_version_1_journal_is_upgraded_in_place_and_keeps_its_jobs(path: Path) -> None:
    with closing(sqlite3.connect(path)) as db:
        db.executescript(VERSION_1)
    with Journal(path) as journal:
        old = current(journal, "aaaaaaaaaaaaaaaa")
        assert (old.state, old.partitions_done) == ("running", 1)
        assert [p.state for p in journal.partitions(old.id)] == ["pending", "completed", "pending"]
        assert journal.load_estimates() == {"gpu_service_s": 1.5}
        assert journal.partition_summary(old.id) == PartitionSummary(2, 1, 0, [])
        job, created = journal.add_job_once("retry-1", 2, "ntt", {})
        assert created
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    with Journal(path) as journal:  # a second open finds it current and changes nothing
        assert journal.add_job_once("retry-1", 2, "ntt", {}) == (job, False)
        assert len(journal.list_jobs()) == 2


@contextmanager
def journal_child(code: str, path: Path) -> Iterator[tuple[subprocess.Popen[str], IO[str]]]:
    """A Python process running ``code`` (with sys, Path, Journal and JournalLock imported and
    the journal's path in ``sys.argv[1]``), then waiting on its stdin until killed."""
    prelude = (
        "import sys\nfrom pathlib import Path\nfrom pacer.journal import Journal, JournalLock\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", prelude + code + "sys.stdin.read()\n", str(path)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        yield process, process.stdout


@pytest.mark.slow
def test_a_killed_process_leaves_a_readable_journal_with_its_job(path: Path) -> None:
    code = (
        "journal = Journal(Path(sys.argv[1]))\n"
        "print(journal.add_job(2, 'w', {'a': 1}).id, flush=True)\n"
    )
    with journal_child(code, path) as (process, stdout):
        job_id = stdout.readline().strip()
        process.kill()
        assert process.wait() == -signal.SIGKILL
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    with Journal(path) as journal:
        job = journal.get_job(job_id)
    assert job is not None
    assert (job.state, job.params) == (JobState.QUEUED, {"a": 1})


def test_a_version_1_journal_gains_the_attempts_table(path: Path) -> None:
    with closing(sqlite3.connect(path)) as db:
        db.executescript(VERSION_1)
    with Journal(path) as journal:
        assert journal.record_attempt("aaaaaaaaaaaaaaaa", 0, "boom", None, 3)[0] == 1
        assert [a.reason for a in journal.partitions("aaaaaaaaaaaaaaaa")[0].attempts] == ["boom"]
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (2,)


def test_the_lock_refuses_a_second_holder_naming_the_first(path: Path) -> None:
    first, second = JournalLock(path), JournalLock(path)
    first.acquire()
    # flock belongs to the open file: a second open of the journal conflicts, in one process as
    # across processes.
    with pytest.raises(JournalInUseError) as refused:
        second.acquire()
    holder = f"pid {os.getpid()} on {socket.gethostname()}"
    assert refused.value.holder == holder
    assert str(refused.value) == (
        f"journal {path} is in use by {holder}, which holds the file's lock (under this name or "
        "another: a hard link or a symlink): stop that pacer, or give this one another journal "
        "file"
    )
    assert not second.held
    first.release()
    second.acquire()  # released: free at once
    assert second.held
    second.release()
    second.release()  # idempotent


@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_the_lock_is_the_files_whatever_name_leads_to_it(tmp_path: Path, link: str) -> None:
    path = tmp_path / "a" / "journal.sqlite"
    other = tmp_path / "b" / "journal.sqlite"
    path.parent.mkdir()
    other.parent.mkdir()
    Journal(path).close()
    if link == "hard":
        other.hardlink_to(path)
    else:
        other.symlink_to(path)
    first = JournalLock(path)
    first.acquire()
    try:
        with pytest.raises(JournalInUseError, match=f"in use by pid {os.getpid()} on "):
            JournalLock(other).acquire()
    finally:
        first.release()


def test_the_lock_writes_nothing_and_leaves_a_lock_file_beside_it_alone(path: Path) -> None:
    # An older pacer's lock file, as a symlink to a file of someone else's: never written.
    victim = path.with_name("victim.txt")
    victim.write_text("keep me\n")
    path.with_name(path.name + ".lock").symlink_to(victim)
    lock = JournalLock(path)
    lock.acquire()
    lock.release()
    assert victim.read_text() == "keep me\n"
    assert path.stat().st_size == 0  # created empty: an empty SQLite database


def test_the_holder_is_read_from_the_kernels_list_of_locks(tmp_path: Path) -> None:
    st = os.stat(tmp_path)
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    locks = tmp_path / "locks"
    locks.write_text(
        f"1: POSIX  ADVISORY  WRITE 11 {device}:{st.st_ino} 0 EOF\n"
        f"2: FLOCK  ADVISORY  WRITE 4021 {device}:{st.st_ino} 0 EOF\n"
        f"2: -> FLOCK  ADVISORY  WRITE 77 {device}:{st.st_ino} 0 EOF\n"
    )
    assert lock_holder(st, locks) == f"pid 4021 on {socket.gethostname()}"
    locks.write_text(f"2: FLOCK  ADVISORY  WRITE -1 {device}:{st.st_ino} 0 EOF\n")
    assert lock_holder(st, locks) == f"a process on {socket.gethostname()}"  # another namespace
    locks.write_text("")
    assert lock_holder(st, locks) is None
    assert lock_holder(st, tmp_path / "missing") is None


def test_held_by_names_the_holder_without_opening_the_file(path: Path) -> None:
    assert held_by(path) is None  # no file
    lock = JournalLock(path)
    lock.acquire()
    try:
        assert held_by(path) == f"pid {os.getpid()} on {socket.gethostname()}"
    finally:
        lock.release()
    assert held_by(path) is None


@pytest.mark.parametrize("locked_first", [False, True], ids=["journal", "lock-then-journal"])
def test_a_new_journal_and_its_wal_and_shm_are_the_owners_alone(
    path: Path, locked_first: bool
) -> None:
    umask = os.umask(0o022)  # the usual umask, which would make them 0644
    try:
        lock = JournalLock(path)
        if locked_first:  # as `pacer serve` does: the lock creates the file
            lock.acquire()
        with Journal(path) as journal:
            journal.add_job(1, None, {})
            made = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
            assert {p.name: oct(p.stat().st_mode & 0o777) for p in made} == {
                p.name: "0o600" for p in made
            }
        if locked_first:
            lock.release()
    finally:
        os.umask(umask)


@pytest.mark.slow
def test_the_lock_is_released_when_its_holder_is_killed(path: Path) -> None:
    code = "JournalLock(Path(sys.argv[1])).acquire()\nprint('locked', flush=True)\n"
    with journal_child(code, path) as (process, stdout):
        assert stdout.readline() == "locked\n"
        with pytest.raises(JournalInUseError, match=f"in use by pid {process.pid} on "):
            JournalLock(path).acquire()
        process.kill()
        assert process.wait() == -signal.SIGKILL
    lock = JournalLock(path)
    lock.acquire()  # the kernel released the killed holder's lock
    lock.release()


@pytest.mark.parametrize("how", ["deleted", "moved", "replaced"])
def test_check_file_tells_when_the_path_no_longer_names_the_open_file(
    journal: Journal, path: Path, how: str
) -> None:
    journal.check_file()
    moved = path.with_name("moved.sqlite")
    if how == "deleted":
        path.unlink()
    elif how == "moved":
        path.rename(moved)
    else:
        path.rename(moved)
        path.write_bytes(moved.read_bytes())
    problem = "replaced by another file" if how == "replaced" else "deleted or moved away"
    with pytest.raises(JournalFileGoneError, match=f"journal file {path} was {problem}") as gone:
        journal.check_file()
    assert gone.value.problem == problem
    if how == "moved":
        moved.rename(path)
        journal.check_file()  # back where it was: fine again


@pytest.mark.parametrize("how", ["moved", "replaced"])
def test_a_write_is_not_committed_to_a_file_the_path_no_longer_names(
    journal: Journal, path: Path, how: str
) -> None:
    kept = journal.add_job(1, None, {})
    moved = path.with_name("moved.sqlite")
    path.rename(moved)
    if how == "replaced":
        path.write_bytes(moved.read_bytes())
    with pytest.raises(JournalFileGoneError) as gone:
        journal.add_job(1, None, {})
    assert isinstance(gone.value, sqlite3.OperationalError)  # a fault the service waits out
    if how == "replaced":
        path.unlink()
    moved.rename(path)  # back: the write was rolled back, not committed to the file
    assert [job.id for job in journal.list_jobs()] == [kept.id]


def test_probe_writes_nothing_and_fails_as_a_write_does(path: Path) -> None:
    with Journal(path, busy_timeout_s=0.01) as journal:
        job = journal.add_job(2, None, {})
        journal.probe()
        assert journal.counts()[JobState.QUEUED] == 1
        with closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN EXCLUSIVE")
            with pytest.raises(sqlite3.OperationalError, match="database is locked"):
                journal.probe()
            with pytest.raises(sqlite3.OperationalError, match="database is locked"):
                journal.complete_partitions([proved(job.id, 0)])
            assert current(journal, job.id).partitions_done == 0  # reads go on
            other.execute("ROLLBACK")
        journal.probe()
        assert journal.complete_partitions([proved(job.id, 0), proved(job.id, 1)])


def test_a_negative_busy_timeout_is_refused(path: Path) -> None:
    with pytest.raises(ValueError, match="busy_timeout_s must be >= 0, got -1"):
        Journal(path, busy_timeout_s=-1)
