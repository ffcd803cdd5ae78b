from __future__ import annotations

import hashlib
import math
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from pacer.journal import (
    MAX_PARTITIONS,
    JobRecord,
    JobState,
    Journal,
    NewerSchemaError,
    PartitionRecord,
    PartitionResult,
    PartitionState,
    UnknownJob,
    result_digest,
)
from tests.conftest import FakeClock

REPO = Path(__file__).resolve().parents[1]


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
        resumed = [(job.id, job.state, pending) for job, pending in journal.incomplete()]
    assert resumed == [
        (urgent.id, "queued", [0, 1]),
        (old.id, "queued", [0, 1, 2]),
        (new.id, "running", [1, 3]),
    ]


def test_a_job_of_100_000_partitions_resumes_with_its_pending_ones(journal: Journal) -> None:
    big = journal.add_job(100_000, None, {})
    small = journal.add_job(2, None, {})
    journal.complete_partitions([proved(big.id, i) for i in range(0, 100_000, 4)])
    journal.complete_partitions([proved(small.id, 1)])
    (resumed_big, big_pending), (_, small_pending) = journal.incomplete()
    assert resumed_big.partitions_done == 25_000
    assert big_pending == [i for i in range(100_000) if i % 4]
    assert small_pending == [0]
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
        db.execute("PRAGMA user_version = 2")
    with pytest.raises(
        NewerSchemaError, match="schema version 2; this pacer reads up to version 1"
    ):
        Journal(path)


def test_a_killed_process_leaves_a_readable_journal_with_its_job(path: Path) -> None:
    code = (
        "import sys\nfrom pathlib import Path\nfrom pacer.journal import Journal\n"
        "journal = Journal(Path(sys.argv[1]))\n"
        "print(journal.add_job(2, 'w', {'a': 1}).id, flush=True)\n"
        "sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, str(path)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        job_id = process.stdout.readline().strip()
        process.kill()
        assert process.wait() == -signal.SIGKILL
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    with Journal(path) as journal:
        job = journal.get_job(job_id)
    assert job is not None
    assert (job.state, job.params) == (JobState.QUEUED, {"a": 1})
