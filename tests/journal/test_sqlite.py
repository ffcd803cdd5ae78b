from __future__ import annotations

import hashlib
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
    MAX_PAGE,
    MAX_PARTITIONS,
    SCHEMA_VERSION,
    Attempt,
    IdempotencyConflict,
    JobRecord,
    JobState,
    Journal,
    JournalFileGoneError,
    JournalInUseError,
    JournalLock,
    NewerSchemaError,
    PartitionRecord,
    PartitionResult,
    PartitionState,
    PartitionSummary,
    UnknownJob,
    result_digest,
)
from pacer.ranges import IndexRanges
from tests.conftest import FakeClock

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "journal.sqlite"


@pytest.fixture
def journal(path: Path, clock: FakeClock) -> Iterator[Journal]:
    with Journal(path, clock) as journal:
        yield journal


def current(journal: Journal, job_id: str) -> JobRecord:
    job = journal.get_job(job_id)
    assert job is not None
    return job


def proved(job_id: str, index: int, digest: str | None = None) -> PartitionResult:
    return PartitionResult(job_id, index, digest or f"d{index}", synthesis_s=3.0, gpu_s=0.5)


def test_add_job_returns_the_queued_job_as_stored(journal: Journal, clock: FakeClock) -> None:
    clock.now = 100.0
    job = journal.add_job(4, "sha-chain", {"depth": 20, "tags": ("a",)}, priority=2)
    assert job.state == JobState.QUEUED
    assert (job.partitions, job.partitions_done, job.priority) == (4, 0, 2)
    assert job.workload == "sha-chain"
    assert job.params == {"depth": 20, "tags": ["a"]}
    assert (job.created_at, job.updated_at, job.error, job.result_digest) == (100, 100, None, None)
    assert journal.get_job(job.id) == job
    assert journal.get_job("nope") is None


def test_list_jobs_is_newest_first_and_filters_by_state(journal: Journal) -> None:
    ids = [journal.add_job(1, None, {}).id for _ in range(4)]
    journal.mark_running(ids[1])
    assert [j.id for j in journal.list_jobs()] == ids[::-1]
    assert [j.id for j in journal.list_jobs(limit=2)] == ids[:1:-1]
    assert [j.id for j in journal.list_jobs(JobState.RUNNING)] == [ids[1]]
    expected = {JobState.QUEUED: 3, JobState.RUNNING: 1}
    assert journal.counts() == dict.fromkeys(JobState, 0) | expected
    with pytest.raises(ValueError, match="limit must be an integer >= 1"):
        journal.list_jobs(limit=0)


def test_a_job_is_durable_when_add_job_returns(journal: Journal, path: Path) -> None:
    job = journal.add_job(2, "w", {"a": 1})
    with Journal(path) as other:
        assert other.get_job(job.id) == job
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT id FROM jobs").fetchall() == [(job.id,)]


def test_a_job_completes_once_whatever_the_batches_and_repeats(journal: Journal) -> None:
    job = journal.add_job(3, None, {})
    twice = [proved(job.id, 0), proved(job.id, 1), proved(job.id, 0)]
    assert journal.complete_partitions(twice) == []
    assert current(journal, job.id).state == JobState.RUNNING
    completed = journal.complete_partitions([proved(job.id, 1), proved(job.id, 2)])
    assert [(j.id, j.state, j.partitions_done) for j in completed] == [(job.id, "completed", 3)]
    assert completed == [journal.get_job(job.id)]
    assert journal.complete_partitions([proved(job.id, 2), proved(job.id, 0)]) == []
    assert journal.get_job(job.id) == completed[0]


def test_result_digest_is_sha256_over_partition_digests_in_index_order(journal: Journal) -> None:
    job = journal.add_job(3, None, {})
    batch = [proved(job.id, i, digest) for i, digest in [(2, "cc"), (0, "aa"), (1, "bb")]]
    (completed,) = journal.complete_partitions(batch)
    assert completed.result_digest == hashlib.sha256(b"aa\nbb\ncc\n").hexdigest()
    assert completed.result_digest == result_digest(["aa", "bb", "cc"])


def test_partitions_keep_their_results_and_pending_ones_are_empty(
    journal: Journal, clock: FakeClock
) -> None:
    job = journal.add_job(3, None, {})
    clock.now = 7.0
    journal.complete_partitions(
        [PartitionResult(job.id, 1, "d1", 3.0, 0.5, phases={"msm": 0.25, "ntt": 0.125}, gpu=1)]
    )
    assert journal.partitions(job.id) == [
        PartitionRecord(job.id, 0, PartitionState.PENDING),
        PartitionRecord(job.id, 1, PartitionState.COMPLETED, 3.0, 0.5,
                        {"msm": 0.25, "ntt": 0.125}, "d1", None, 1, 7.0),
        PartitionRecord(job.id, 2, PartitionState.PENDING),
    ]  # fmt: skip


def test_a_failed_partition_fails_its_job_and_later_results_are_ignored(
    journal: Journal, clock: FakeClock
) -> None:
    job = journal.add_job(3, None, {})
    journal.complete_partitions([proved(job.id, 0)])
    clock.now = 5.0
    failed = journal.fail_partition(job.id, 1, "out of GPU memory")
    assert (failed.state, failed.error, failed.updated_at) == ("failed", "out of GPU memory", 5.0)
    assert [p.state for p in journal.partitions(job.id)] == ["completed", "failed", "pending"]
    assert journal.partitions(job.id)[1].error == "out of GPU memory"
    assert journal.complete_partitions([proved(job.id, 1), proved(job.id, 2)]) == []
    assert journal.get_job(job.id) == failed
    assert journal.fail_partition(job.id, 2, "again") == failed
    assert journal.incomplete() == []


def test_cancel_stops_a_job_and_its_later_results_are_ignored(journal: Journal) -> None:
    job = journal.add_job(2, None, {})
    journal.mark_running(job.id)
    cancelled = journal.cancel(job.id)
    assert cancelled is not None
    assert cancelled.state == JobState.CANCELLED
    assert journal.complete_partitions([proved(job.id, 0), proved(job.id, 1)]) == []
    assert journal.get_job(job.id) == cancelled
    assert journal.partitions(job.id)[0].state == PartitionState.PENDING
    assert journal.mark_running(job.id) == cancelled
    assert journal.cancel(job.id) == cancelled
    assert journal.cancel("nope") is None


def test_cancel_leaves_a_finished_job_as_it_is(journal: Journal) -> None:
    job = journal.add_job(1, None, {})
    (completed,) = journal.complete_partitions([proved(job.id, 0)])
    assert journal.cancel(job.id) == completed


def test_mark_running_moves_a_queued_job(journal: Journal, clock: FakeClock) -> None:
    job = journal.add_job(1, None, {})
    clock.now = 3.0
    running = journal.mark_running(job.id)
    assert (running.state, running.updated_at) == (JobState.RUNNING, 3.0)
    assert journal.get_job(job.id) == running == journal.mark_running(job.id)


def test_unknown_jobs_raise_unknown_job_and_a_bad_batch_writes_nothing(journal: Journal) -> None:
    job = journal.add_job(2, None, {})
    with pytest.raises(UnknownJob, match="unknown job 'nope'") as caught:
        journal.complete_partitions([proved(job.id, 0), proved("nope", 0)])
    assert caught.value.job_id == "nope"
    with pytest.raises(ValueError, match="index must be from 0 to 1 for job"):
        journal.complete_partitions([proved(job.id, 0), proved(job.id, 2)])
    assert journal.get_job(job.id) == job
    for call in (
        lambda: journal.mark_running("nope"),
        lambda: journal.fail_partition("nope", 0, "boom"),
        lambda: journal.partitions("nope"),
    ):
        with pytest.raises(UnknownJob):
            call()


def test_incomplete_lists_pending_partitions_by_priority_then_age_across_a_reopen(
    path: Path, clock: FakeClock
) -> None:
    with Journal(path, clock) as journal:
        old = journal.add_job(3, None, {})
        clock.advance(1)
        urgent = journal.add_job(2, None, {}, priority=5)
        clock.advance(1)
        new = journal.add_job(4, None, {})
        done = journal.add_job(1, None, {})
        gone = journal.add_job(1, None, {})
        journal.complete_partitions([proved(new.id, 2), proved(new.id, 0), proved(done.id, 0)])
        journal.cancel(gone.id)
    with Journal(path, clock) as journal:
        resumed = [(job.id, job.state, list(pending)) for job, pending in journal.incomplete()]
    assert resumed == [
        (urgent.id, "queued", [0, 1]),
        (old.id, "queued", [0, 1, 2]),
        (new.id, "running", [1, 3]),
    ]


def test_a_job_of_a_million_partitions_resumes_as_the_runs_between_completed_ones(
    journal: Journal,
) -> None:
    journal.add_job(MAX_PARTITIONS, None, {})
    begun = journal.add_job(MAX_PARTITIONS, None, {})
    journal.complete_partitions([proved(begun.id, i) for i in (0, 1, 5, MAX_PARTITIONS - 1)])
    (_, fresh_pending), (_, begun_pending) = journal.incomplete()
    assert fresh_pending.runs() == [(0, MAX_PARTITIONS)]
    assert begun_pending.runs() == [(2, 5), (6, MAX_PARTITIONS - 1)]
    assert len(begun_pending) == MAX_PARTITIONS - 4


def test_a_job_of_100_000_partitions_resumes_with_its_pending_ones(journal: Journal) -> None:
    big = journal.add_job(100_000, None, {})
    small = journal.add_job(2, None, {})
    journal.complete_partitions([proved(big.id, i) for i in range(0, 100_000, 4)])
    journal.complete_partitions([proved(small.id, 1)])
    (resumed_big, big_pending), (_, small_pending) = journal.incomplete()
    assert resumed_big.partitions_done == 25_000
    assert list(big_pending) == [i for i in range(100_000) if i % 4]
    assert len(big_pending.runs()) == 25_000  # the gaps between completed ones
    assert small_pending.runs() == [(0, 1)]
    assert [p.state for p in journal.partitions(small.id)] == ["pending", "completed"]


def test_estimates_round_trip_across_a_reopen(path: Path) -> None:
    with Journal(path) as journal:
        assert journal.load_estimates() is None
        journal.save_estimates({"gpu_service_s": 1.0, "synthesis_s": None})
        journal.save_estimates({"gpu_service_s": 2.5, "synthesis_s": 30, "synthesis_sd_s": 0.0})
    with Journal(path) as journal:
        loaded = journal.load_estimates()
    assert loaded == {"gpu_service_s": 2.5, "synthesis_s": 30.0, "synthesis_sd_s": 0.0}


def test_estimates_keep_the_key_they_were_saved_with(path: Path) -> None:
    with Journal(path) as journal:
        assert journal.load_estimates_key() is None
        journal.save_estimates({"gpu_service_s": 0.16, "synthesis_s": 1.4}, key="ntt/h200/32")
        assert journal.load_estimates() == {"gpu_service_s": 0.16, "synthesis_s": 1.4}
        assert journal.load_estimates_key() == "ntt/h200/32"
        journal.save_estimates({"gpu_service_s": 0.16, "synthesis_s": 1.4})  # no key: none
        assert journal.load_estimates_key() is None


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf, "2"], ids=["neg", "nan", "inf", "str"])
def test_save_estimates_refuses_what_is_not_a_duration(journal: Journal, value: Any) -> None:
    with pytest.raises(ValueError, match="estimate 'gpu_service_s' must be a finite number"):
        journal.save_estimates({"gpu_service_s": value})
    assert journal.load_estimates() is None


def test_prune_deletes_only_terminal_jobs_older_than_the_retention(
    journal: Journal, path: Path, clock: FakeClock
) -> None:
    old_done = journal.add_job(1, None, {})
    journal.complete_partitions([proved(old_done.id, 0)])
    old_cancelled = journal.add_job(2, None, {})
    journal.cancel(old_cancelled.id)
    old_running = journal.add_job(2, None, {})
    journal.complete_partitions([proved(old_running.id, 0)])
    clock.advance(100)
    recent_failed = journal.add_job(1, None, {})
    journal.fail_partition(recent_failed.id, 0, "boom")
    clock.advance(50)
    assert journal.prune(retention_s=120) == 2
    assert {j.id for j in journal.list_jobs()} == {old_running.id, recent_failed.id}
    with pytest.raises(UnknownJob):
        journal.partitions(old_done.id)
    assert journal.prune(retention_s=0) == 1
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT DISTINCT job_id FROM partitions").fetchall() == [
            (old_running.id,)
        ]
    with pytest.raises(ValueError, match="retention_s must be a finite number of seconds >= 0"):
        journal.prune(-1.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"partitions": 0}, f"partitions must be an integer from 1 to {MAX_PARTITIONS}, got 0"),
        ({"partitions": MAX_PARTITIONS + 1}, "partitions must be an integer from 1 to"),
        ({"partitions": 2.0}, "partitions must be an integer"),
        ({"workload": ""}, "workload must be a non-empty string or None"),
        ({"params": [1]}, "params must be a dict with string keys"),
        ({"params": {1: "a"}}, "params must be a dict with string keys"),
        ({"params": {"x": math.nan}}, "params must be JSON-serializable"),
        ({"params": {"x": object()}}, "params must be JSON-serializable"),
        ({"priority": True}, "priority must be a 64-bit integer"),
    ],
    ids=["zero", "too-many", "float", "empty-workload", "list", "int-key", "nan", "object", "bool"],
)
def test_add_job_refuses_invalid_fields_and_writes_nothing(
    journal: Journal, kwargs: dict[str, Any], message: str
) -> None:
    job: dict[str, Any] = {"partitions": 2, "workload": "w", "params": {}} | kwargs
    with pytest.raises(ValueError, match=message):
        journal.add_job(**job)
    assert journal.list_jobs() == []


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


def test_fail_partition_refuses_an_empty_error(journal: Journal) -> None:
    job = journal.add_job(1, None, {})
    with pytest.raises(ValueError, match="error must be a non-empty string"):
        journal.fail_partition(job.id, 0, "")


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


def test_an_idempotency_key_returns_its_job_for_the_same_request_only(
    journal: Journal, clock: FakeClock
) -> None:
    job, created = journal.add_job_once("k-1", 4, "w", {"seed": 1}, priority=2)
    assert created
    clock.advance(5)
    assert journal.add_job_once("k-1", 4, "w", {"seed": 1}, priority=2) == (job, False)
    assert journal.job_for_key("k-1", 4, "w", {"seed": 1}, 2) == job
    assert journal.job_for_key("k-2", 4, "w", {"seed": 1}, 2) is None
    for changed in [(5, "w", {"seed": 1}, 2), (4, "w", {"seed": 2}, 2), (4, "w", {"seed": 1}, 0)]:
        with pytest.raises(IdempotencyConflict, match=f"used for job {job.id} with a different"):
            journal.add_job_once("k-1", *changed)
        with pytest.raises(IdempotencyConflict):
            journal.job_for_key("k-1", *changed)
    assert journal.list_jobs() == [job]
    with pytest.raises(ValueError, match="idempotency key must be a string of 1 to 128"):
        journal.add_job_once("k" * 129, 1, "w", {})


def test_an_idempotency_key_is_forgotten_with_its_pruned_job(
    journal: Journal, clock: FakeClock
) -> None:
    job, _ = journal.add_job_once("k", 1, "w", {})
    journal.complete_partitions([proved(job.id, 0)])
    clock.advance(100)
    assert journal.prune(retention_s=10) == 1
    again, created = journal.add_job_once("k", 2, "w", {})
    assert created
    assert again.id != job.id


def test_a_page_of_a_million_partitions_reads_at_most_a_page_of_rows(journal: Journal) -> None:
    big = journal.add_job(MAX_PARTITIONS, None, {})
    journal.complete_partitions([proved(big.id, i) for i in range(0, 20_000, 2)])
    journal.fail_partition(big.id, 20_001, "lost the GPU")
    journal.fail_partition(big.id, 7, "ignored: the job has failed")  # not journaled
    rows = 0

    def counting(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> tuple[Any, ...]:
        nonlocal rows
        rows += 1
        return row

    journal._db.row_factory = counting  # count the rows SQLite hands to Python
    page = journal.partition_page(big.id, 10_000, MAX_PAGE)
    assert rows <= MAX_PAGE + 1  # the page's rows, and the job's
    assert [p.index for p in page] == list(range(10_000, 11_000))
    assert [p.state for p in page[:3]] == ["completed", "pending", "completed"]
    assert page[1] == PartitionRecord(big.id, 10_001, PartitionState.PENDING)
    rows = 0
    summary = journal.partition_summary(big.id)
    assert rows <= 10
    assert summary == PartitionSummary(
        pending=MAX_PARTITIONS - 10_001, completed=10_000, failed=1,
        first_failures=[(20_001, "lost the GPU")],
    )  # fmt: skip
    rows = 0
    assert journal.partition_page(big.id, MAX_PARTITIONS - 2, 10) == [
        PartitionRecord(big.id, MAX_PARTITIONS - 2, PartitionState.PENDING),
        PartitionRecord(big.id, MAX_PARTITIONS - 1, PartitionState.PENDING),
    ]
    assert journal.partition_page(big.id, MAX_PARTITIONS, 10) == []
    assert rows <= 2


@pytest.mark.parametrize(
    ("offset", "limit", "message"),
    [
        (-1, 10, "offset must be an integer >= 0"),
        (0, 0, "limit must be an integer from 1 to"),
        (0, MAX_PAGE + 1, "limit must be an integer from 1 to"),
        (True, 10, "offset must be an integer"),
    ],
    ids=["negative-offset", "zero-limit", "huge-limit", "bool-offset"],
)
def test_partition_page_refuses_bad_bounds(
    journal: Journal, offset: Any, limit: Any, message: str
) -> None:
    job = journal.add_job(3, None, {})
    with pytest.raises(ValueError, match=message):
        journal.partition_page(job.id, offset, limit)
    with pytest.raises(UnknownJob):
        journal.partition_page("nope", 0, 10)


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


def test_failed_attempts_are_numbered_kept_and_fail_the_job_at_the_limit(
    journal: Journal, clock: FakeClock
) -> None:
    job = journal.add_job(3, None, {})
    clock.now = 1.0
    assert journal.record_attempt(job.id, 1, "prove timed out after 300 s", 0, 3) == (1, job)
    clock.now = 2.0
    number, still = journal.record_attempt(job.id, 1, "proving failed: boom", 1, 3)
    assert (number, still.state) == (2, "queued")
    assert journal.incomplete() == [(still, IndexRanges([(0, 3)]))]  # pending, to be tried again
    clock.now = 3.0
    number, failed = journal.record_attempt(job.id, 1, "proving failed: boom", None, 3)
    assert (number, failed.state) == (3, "failed")
    assert failed.error == "partition 1 failed after 3 attempts: proving failed: boom"
    assert journal.partitions(job.id)[1] == PartitionRecord(
        job.id, 1, PartitionState.FAILED, error=failed.error, completed_at=3.0,
        attempts=[Attempt(1, 1, "prove timed out after 300 s", 0, 1.0),
                  Attempt(1, 2, "proving failed: boom", 1, 2.0),
                  Attempt(1, 3, "proving failed: boom", None, 3.0)],
    )  # fmt: skip
    assert [(a.attempt, a.at) for a in journal.failures(job.id, limit=2)] == [(3, 3.0), (2, 2.0)]
    assert journal.record_attempt(job.id, 2, "late", None, 3) == (0, failed)  # ended: as is


def test_attempts_of_a_partition_that_then_completed_stay_with_it(journal: Journal) -> None:
    job = journal.add_job(2, None, {})
    journal.record_attempt(job.id, 0, "synthesis failed: no witness", None, 3)
    journal.complete_partitions([proved(job.id, 0)])
    part = journal.partitions(job.id)[0]
    assert part.state == "completed"
    assert [a.reason for a in part.attempts] == ["synthesis failed: no witness"]
    assert journal.record_attempt(job.id, 0, "stale", None, 3)[0] == 0  # completed: nothing
    assert journal.partitions(job.id)[1].attempts == []


def test_one_attempt_allowed_fails_the_job_at_the_first_failure(journal: Journal) -> None:
    job = journal.add_job(1, None, {})
    number, failed = journal.record_attempt(job.id, 0, "verification failed", 0, 1)
    assert (number, failed.error) == (1, "partition 0 failed after 1 attempt: verification failed")


def test_fail_exhausted_fails_the_jobs_with_a_pending_partition_out_of_attempts(
    journal: Journal,
) -> None:
    tried, fine, done = (journal.add_job(2, None, {}) for _ in range(3))
    for reason in ("a", "b"):
        journal.record_attempt(tried.id, 1, reason, None, 5)
    journal.record_attempt(fine.id, 0, "once", None, 5)
    journal.record_attempt(done.id, 0, "x", None, 5)
    journal.record_attempt(done.id, 0, "y", None, 5)
    journal.complete_partitions([proved(done.id, 0)])  # out of attempts, but it completed
    assert journal.fail_exhausted(3) == []
    (failed,) = journal.fail_exhausted(2)
    assert (failed.id, failed.error) == (tried.id, "partition 1 failed after 2 attempts: b")
    assert [job.id for job, _ in journal.incomplete()] == [fine.id, done.id]


def test_prune_deletes_the_attempts_of_the_jobs_it_deletes(
    journal: Journal, path: Path, clock: FakeClock
) -> None:
    old = journal.add_job(1, None, {})
    journal.record_attempt(old.id, 0, "boom", None, 1)
    kept = journal.add_job(1, None, {})
    journal.record_attempt(kept.id, 0, "boom", None, 3)
    clock.advance(100)
    assert journal.prune(retention_s=10) == 1
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT DISTINCT job_id FROM attempts").fetchall() == [(kept.id,)]


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
    # flock belongs to the open file: a second open of the lock file conflicts, in one process
    # as across processes.
    with pytest.raises(JournalInUseError) as refused:
        second.acquire()
    holder = f"pid {os.getpid()} on {socket.gethostname()}"
    assert refused.value.holder == holder
    assert str(refused.value) == (
        f"journal {path} is in use by {holder} (it holds {path}.lock): stop that pacer, "
        "or give this one another journal file"
    )
    assert not second.held
    first.release()
    second.acquire()  # released: free at once
    assert second.held
    second.release()
    second.release()  # idempotent


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
