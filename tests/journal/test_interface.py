from __future__ import annotations

import inspect
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pacer.config import JournalSettings
from pacer.journal import (
    JournalBackend,
    JournalFileError,
    JournalFileGoneError,
    JournalInUseError,
    NewerSchemaError,
    SqliteJournal,
    open_journal,
)
from pacer.pgjournal import PgJournal
from tests.conftest import FakeClock


def backend_members() -> list[str]:
    """The members the protocol declares: its methods and the error classes it names."""
    declared = vars(JournalBackend)
    methods = [name for name, value in declared.items()
               if callable(value) and not name.startswith("_")]  # fmt: skip
    return sorted([*methods, *JournalBackend.__annotations__])


@pytest.fixture
def journal(tmp_path: Path, clock: FakeClock) -> Iterator[SqliteJournal]:
    with SqliteJournal(tmp_path / "journal.sqlite", clock) as journal:
        yield journal


def test_the_protocol_lists_what_the_service_asks_of_the_journal() -> None:
    assert backend_members() == [
        "Error", "OperationalError", "add_job", "add_job_once", "cancel", "check_file", "close",
        "complete_partitions", "counts", "fail_exhausted", "failures", "get_job",
        "incomplete", "job_for_key", "jobs_page", "list_jobs", "load_estimates",
        "load_estimates_key", "now", "partition_page", "partition_summary", "probe", "prune",
        "record_attempt", "save_estimates", "withdraw",
    ]  # fmt: skip


def test_the_sqlite_journal_is_a_journal_backend(journal: SqliteJournal) -> None:
    assert isinstance(journal, JournalBackend)
    assert (journal.Error, journal.OperationalError) == (sqlite3.Error, sqlite3.OperationalError)


@pytest.mark.parametrize("backend", [SqliteJournal, PgJournal], ids=["sqlite", "postgres"])
@pytest.mark.parametrize("name", [n for n in backend_members() if "Error" not in n])
def test_each_journal_takes_the_arguments_the_protocol_names(
    backend: type[JournalBackend], name: str
) -> None:
    declared = inspect.signature(getattr(JournalBackend, name))
    implemented = inspect.signature(getattr(backend, name))
    assert implemented == declared


def test_a_store_lacking_a_member_is_not_a_journal_backend() -> None:
    members = {name: getattr(SqliteJournal, name) for name in backend_members()}
    assert isinstance(type("Complete", (), members)(), JournalBackend)
    for name in members:
        lacking = type(f"Without_{name}", (), {k: v for k, v in members.items() if k != name})
        assert not isinstance(lacking(), JournalBackend), name


def test_open_journal_opens_the_sqlite_file_the_settings_name(
    tmp_path: Path, clock: FakeClock
) -> None:
    settings = JournalSettings(path=tmp_path / "named.sqlite", busy_timeout_s=0.25)
    journal = open_journal(settings, clock)
    try:
        assert isinstance(journal, SqliteJournal)
        assert journal.path == settings.path
        assert journal.add_job(2, None, {}).created_at == clock()
        busy_ms = journal._db.execute("PRAGMA busy_timeout").fetchone()[0]
        assert busy_ms == 250
    finally:
        journal.close()


@pytest.mark.parametrize(
    "make",
    [
        lambda p: NewerSchemaError(p, 9),
        lambda p: JournalInUseError(p, "pid 1 on a"),
        lambda p: JournalFileGoneError(p, "deleted or moved away"),
    ],
    ids=["newer-schema", "in-use", "gone"],
)
def test_each_file_error_is_a_journal_file_error_naming_its_path(
    make: Callable[[Path], JournalFileError],
) -> None:
    path = Path("/var/lib/pacer/journal.sqlite")
    error = make(path)
    assert isinstance(error, JournalFileError)
    assert isinstance(error, RuntimeError)
    assert error.path == path
    assert str(path) in str(error)


@pytest.mark.parametrize(
    "call",
    [
        lambda j: j.list_jobs(limit=0),
        lambda j: j.failures(j.add_job(1, None, {}).id, 0),
        lambda j: j.record_attempt(j.add_job(1, None, {}).id, 0, "boom", None, 0),
        lambda j: j.fail_exhausted(True),
    ],
    ids=["list_jobs-limit", "failures-limit", "record_attempt-max", "fail_exhausted-max"],
)
def test_counts_that_must_be_at_least_one_are_refused_alike(
    journal: SqliteJournal, call: Callable[[SqliteJournal], object]
) -> None:
    with pytest.raises(ValueError, match=r"^(limit|max_attempts) must be an integer >= 1, got "):
        call(journal)
