"""What every journal backend holds to, run against each: the SQLite file and PostgreSQL."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pacer.journal import (
    MAX_PAGE,
    MAX_PARTITIONS,
    Attempt,
    IdempotencyConflict,
    JobState,
    JournalBackend,
    PartitionRecord,
    PartitionResult,
    PartitionState,
    PartitionSummary,
    UnknownJob,
    result_digest,
)
from pacer.ranges import IndexRanges
from tests.conftest import FakeClock
from tests.journal.stores import AnyJournal, PgStore, SqliteStore, Store, current, proved


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "sqlite":
        return SqliteStore(tmp_path / "journal.sqlite")
    return PgStore(request.getfixturevalue("postgres_url"))


@pytest.fixture
def journal(store: Store, clock: FakeClock) -> Iterator[AnyJournal]:
    with store.open(clock) as journal:
        yield journal


def test_each_store_is_a_journal_backend(journal: AnyJournal) -> None:
    assert isinstance(journal, JournalBackend)
    assert issubclass(journal.OperationalError, journal.Error)


def test_add_job_returns_the_queued_job_as_stored(journal: AnyJournal, clock: FakeClock) -> None:
    clock.now = 100.0
    job = journal.add_job(4, "sha-chain", {"depth": 20, "tags": ("a",)}, priority=2)
    assert job.state == JobState.QUEUED
    assert (job.partitions, job.partitions_done, job.priority) == (4, 0, 2)
    assert job.workload == "sha-chain"
    assert job.params == {"depth": 20, "tags": ["a"]}
    assert (job.created_at, job.updated_at, job.error, job.result_digest) == (100, 100, None, None)
    assert journal.get_job(job.id) == job
    assert journal.get_job("nope") is None


def test_list_jobs_is_newest_first_and_filters_by_state(journal: AnyJournal) -> None:
    ids = [journal.add_job(1, None, {}).id for _ in range(4)]
    journal.mark_running(ids[1])
    assert [j.id for j in journal.list_jobs()] == ids[::-1]
    assert [j.id for j in journal.list_jobs(limit=2)] == ids[:1:-1]
    assert [j.id for j in journal.list_jobs(JobState.RUNNING)] == [ids[1]]
    expected = {JobState.QUEUED: 3, JobState.RUNNING: 1}
    assert journal.counts() == dict.fromkeys(JobState, 0) | expected
    with pytest.raises(ValueError, match="limit must be an integer >= 1"):
        journal.list_jobs(limit=0)


def test_jobs_page_by_page_sees_each_job_once_while_jobs_arrive(
    journal: AnyJournal, clock: FakeClock
) -> None:
    ids = [journal.add_job(1, None, {}).id for _ in range(5)]  # one created_at: seq decides
    seen: list[str] = []
    page, key = journal.jobs_page(None, 2)
    while True:
        seen += [j.id for j in page]
        journal.add_job(1, None, {})  # newer: before the first page, never on a later one
        clock.now += 1.0
        if key is None:
            break
        page, key = journal.jobs_page(None, 2, key)
    assert seen == ids[::-1]
    journal.cancel(ids[2])  # 7 queued: the 3 added while paging, then 4 of ids
    page, key = journal.jobs_page(JobState.QUEUED, 4)
    rest, end = journal.jobs_page(JobState.QUEUED, 4, key)
    assert [j.id for j in page + rest][-4:] == [ids[4], ids[3], ids[1], ids[0]]
    assert (len(rest), end) == (3, None)
    with pytest.raises(ValueError, match="limit must be an integer >= 1"):
        journal.jobs_page(None, 0)


def test_a_job_is_durable_when_add_job_returns(journal: AnyJournal, store: Store) -> None:
    job = journal.add_job(2, "w", {"a": 1})
    with store.open() as other:
        assert other.get_job(job.id) == job
    assert store.ids_in("jobs", "id") == [job.id]


def test_a_job_completes_once_whatever_the_batches_and_repeats(journal: AnyJournal) -> None:
    job = journal.add_job(3, None, {})
    twice = [proved(job.id, 0), proved(job.id, 1), proved(job.id, 0)]
    assert journal.complete_partitions(twice) == []
    assert current(journal, job.id).state == JobState.RUNNING
    assert current(journal, job.id).partitions_done == 2
    completed = journal.complete_partitions([proved(job.id, 1), proved(job.id, 2)])
    assert [(j.id, j.state, j.partitions_done) for j in completed] == [(job.id, "completed", 3)]
    assert completed == [journal.get_job(job.id)]
    assert journal.complete_partitions([proved(job.id, 2), proved(job.id, 0)]) == []
    assert journal.get_job(job.id) == completed[0]


def test_result_digest_is_sha256_over_partition_digests_in_index_order(
    journal: AnyJournal,
) -> None:
    job = journal.add_job(3, None, {})
    batch = [proved(job.id, i, digest) for i, digest in [(2, "cc"), (0, "aa"), (1, "ßb")]]
    (completed,) = journal.complete_partitions(batch)
    assert completed.result_digest == hashlib.sha256("aa\nßb\ncc\n".encode()).hexdigest()
    assert completed.result_digest == result_digest(["aa", "ßb", "cc"])


def test_partitions_keep_their_results_and_pending_ones_are_empty(
    journal: AnyJournal, clock: FakeClock
) -> None:
    job = journal.add_job(3, None, {})
    clock.now = 7.0
    journal.complete_partitions(
        [PartitionResult(job.id, 1, "d1", 3, 0.5, phases={"msm": 0.25, "ntt": 0.125}, gpu=1)]
    )
    assert journal.partitions(job.id) == [
        PartitionRecord(job.id, 0, PartitionState.PENDING),
        PartitionRecord(job.id, 1, PartitionState.COMPLETED, 3.0, 0.5,
                        {"msm": 0.25, "ntt": 0.125}, "d1", None, 1, 7.0),
        PartitionRecord(job.id, 2, PartitionState.PENDING),
    ]  # fmt: skip


def test_a_failed_partition_fails_its_job_and_later_results_are_ignored(
    journal: AnyJournal, clock: FakeClock
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


def test_cancel_stops_a_job_and_its_later_results_are_ignored(journal: AnyJournal) -> None:
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


def test_cancel_leaves_a_finished_job_as_it_is(journal: AnyJournal) -> None:
    job = journal.add_job(1, None, {})
    (completed,) = journal.complete_partitions([proved(job.id, 0)])
    assert journal.cancel(job.id) == completed


def test_mark_running_moves_a_queued_job(journal: AnyJournal, clock: FakeClock) -> None:
    job = journal.add_job(1, None, {})
    clock.now = 3.0
    running = journal.mark_running(job.id)
    assert (running.state, running.updated_at) == (JobState.RUNNING, 3.0)
    assert journal.get_job(job.id) == running == journal.mark_running(job.id)


def test_unknown_jobs_raise_unknown_job_and_a_bad_batch_writes_nothing(
    journal: AnyJournal,
) -> None:
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
        lambda: journal.record_attempt("nope", 0, "boom", None, 3),
    ):
        with pytest.raises(UnknownJob):
            call()
    assert journal.complete_partitions([]) == []


def test_incomplete_lists_pending_partitions_by_priority_then_age_across_a_reopen(
    store: Store, clock: FakeClock
) -> None:
    with store.open(clock) as journal:
        old = journal.add_job(3, None, {})
        clock.advance(1)
        urgent = journal.add_job(2, None, {}, priority=5)
        clock.advance(1)
        new = journal.add_job(4, None, {})
        done = journal.add_job(1, None, {})
        gone = journal.add_job(1, None, {})
        journal.complete_partitions([proved(new.id, 2), proved(new.id, 0), proved(done.id, 0)])
        journal.cancel(gone.id)
    with store.open(clock) as journal:
        resumed = [(job.id, job.state, list(pending)) for job, pending in journal.incomplete()]
    assert resumed == [
        (urgent.id, "queued", [0, 1]),
        (old.id, "queued", [0, 1, 2]),
        (new.id, "running", [1, 3]),
    ]


def test_a_job_of_a_million_partitions_resumes_as_the_runs_between_completed_ones(
    journal: AnyJournal,
) -> None:
    journal.add_job(MAX_PARTITIONS, None, {})
    begun = journal.add_job(MAX_PARTITIONS, None, {})
    journal.complete_partitions([proved(begun.id, i) for i in (0, 1, 5, MAX_PARTITIONS - 1)])
    (_, fresh_pending), (_, begun_pending) = journal.incomplete()
    assert fresh_pending.runs() == [(0, MAX_PARTITIONS)]
    assert begun_pending.runs() == [(2, 5), (6, MAX_PARTITIONS - 1)]
    assert len(begun_pending) == MAX_PARTITIONS - 4


def test_a_job_of_100_000_partitions_resumes_with_its_pending_ones(journal: AnyJournal) -> None:
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


def test_estimates_round_trip_across_a_reopen(store: Store) -> None:
    with store.open() as journal:
        assert journal.load_estimates() is None
        journal.save_estimates({"gpu_service_s": 1.0, "synthesis_s": None})
        journal.save_estimates({"gpu_service_s": 2.5, "synthesis_s": 30, "synthesis_sd_s": 0.0})
    with store.open() as journal:
        loaded = journal.load_estimates()
    assert loaded == {"gpu_service_s": 2.5, "synthesis_s": 30.0, "synthesis_sd_s": 0.0}


def test_estimates_keep_the_key_they_were_saved_with(journal: AnyJournal) -> None:
    assert journal.load_estimates_key() is None
    journal.save_estimates({"gpu_service_s": 0.16, "synthesis_s": 1.4}, key="ntt/h200/32")
    assert journal.load_estimates() == {"gpu_service_s": 0.16, "synthesis_s": 1.4}
    assert journal.load_estimates_key() == "ntt/h200/32"
    journal.save_estimates({"gpu_service_s": 0.16, "synthesis_s": 1.4})  # no key: none
    assert journal.load_estimates_key() is None


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf, "2"], ids=["neg", "nan", "inf", "str"])
def test_save_estimates_refuses_what_is_not_a_duration(journal: AnyJournal, value: Any) -> None:
    with pytest.raises(ValueError, match="estimate 'gpu_service_s' must be a finite number"):
        journal.save_estimates({"gpu_service_s": value})
    with pytest.raises(ValueError, match="estimate names must be strings other than 'key'"):
        journal.save_estimates({"key": 1.0})
    assert journal.load_estimates() is None


def test_prune_deletes_only_terminal_jobs_older_than_the_retention(
    journal: AnyJournal, store: Store, clock: FakeClock
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
    assert store.ids_in("partitions") == [old_running.id]
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
    journal: AnyJournal, kwargs: dict[str, Any], message: str
) -> None:
    job: dict[str, Any] = {"partitions": 2, "workload": "w", "params": {}} | kwargs
    with pytest.raises(ValueError, match=message):
        journal.add_job(**job)
    assert journal.list_jobs() == []


def test_fail_partition_refuses_an_empty_error(journal: AnyJournal) -> None:
    job = journal.add_job(1, None, {})
    with pytest.raises(ValueError, match="error must be a non-empty string"):
        journal.fail_partition(job.id, 0, "")


def test_an_idempotency_key_returns_its_job_for_the_same_request_only(
    journal: AnyJournal, clock: FakeClock
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


def test_prune_measures_from_the_earlier_of_its_clock_and_the_callers(
    journal: AnyJournal, clock: FakeClock
) -> None:
    done = journal.add_job(1, None, {})
    journal.complete_partitions([proved(done.id, 0)])
    trusted = clock()
    clock.advance(8 * 86400)  # the journal's clock is set 8 days on
    assert journal.prune(retention_s=7 * 86400, now=trusted + 60) == 0  # the caller's is earlier
    assert journal.get_job(done.id) is not None
    assert journal.prune(retention_s=7 * 86400, now=clock() + 60) == 1  # the journal's is


def test_now_is_the_clock_jobs_are_stamped_with(journal: AnyJournal, clock: FakeClock) -> None:
    clock.advance(12.5)
    assert journal.now() == clock()
    assert journal.add_job(1, None, {}).created_at == journal.now()


def test_an_idempotency_key_is_forgotten_with_its_pruned_job(
    journal: AnyJournal, clock: FakeClock
) -> None:
    job, _ = journal.add_job_once("k", 1, "w", {})
    journal.complete_partitions([proved(job.id, 0)])
    clock.advance(100)
    assert journal.prune(retention_s=10) == 1
    again, created = journal.add_job_once("k", 2, "w", {})
    assert created
    assert again.id != job.id


def test_a_page_of_a_million_partitions_reads_at_most_a_page_of_rows(
    journal: AnyJournal, store: Store
) -> None:
    big = journal.add_job(MAX_PARTITIONS, None, {})
    journal.complete_partitions([proved(big.id, i) for i in range(0, 20_000, 2)])
    journal.fail_partition(big.id, 20_001, "lost the GPU")
    journal.fail_partition(big.id, 7, "ignored: the job has failed")  # not journaled
    with store.counting_rows(journal) as rows:
        page = journal.partition_page(big.id, 10_000, MAX_PAGE)
    assert rows.count <= MAX_PAGE + 1  # the page's rows, and the job's
    assert [p.index for p in page] == list(range(10_000, 11_000))
    assert [p.state for p in page[:3]] == ["completed", "pending", "completed"]
    assert page[1] == PartitionRecord(big.id, 10_001, PartitionState.PENDING)
    with store.counting_rows(journal) as rows:
        summary = journal.partition_summary(big.id)
    assert rows.count <= 10
    assert summary == PartitionSummary(
        pending=MAX_PARTITIONS - 10_001, completed=10_000, failed=1,
        first_failures=[(20_001, "lost the GPU")],
    )  # fmt: skip
    with store.counting_rows(journal) as rows:
        assert journal.partition_page(big.id, MAX_PARTITIONS - 2, 10) == [
            PartitionRecord(big.id, MAX_PARTITIONS - 2, PartitionState.PENDING),
            PartitionRecord(big.id, MAX_PARTITIONS - 1, PartitionState.PENDING),
        ]
        assert journal.partition_page(big.id, MAX_PARTITIONS, 10) == []
    assert rows.count <= 2


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
    journal: AnyJournal, offset: Any, limit: Any, message: str
) -> None:
    job = journal.add_job(3, None, {})
    with pytest.raises(ValueError, match=message):
        journal.partition_page(job.id, offset, limit)
    with pytest.raises(UnknownJob):
        journal.partition_page("nope", 0, 10)


def test_failed_attempts_are_numbered_kept_and_fail_the_job_at_the_limit(
    journal: AnyJournal, clock: FakeClock
) -> None:
    job = journal.add_job(3, None, {})
    clock.now = 1.0
    assert journal.record_attempt(job.id, 1, "prove timed out after 300 s", 0, 3) == (1, job)
    clock.now = 2.0
    number, still = journal.record_attempt(job.id, 1, "proving failed: boom", 1, 3)
    assert (number, still.state) == (2, "queued")
    assert journal.incomplete() == [(still, IndexRanges([(0, 3)]))]  # pending, to be tried again
    clock.now = 3.0
    number, failed = journal.record_attempt(job.id, 1, "proving failed: boom", 1, 3)
    assert (number, failed.state) == (3, "failed")
    assert failed.error == "partition 1 failed after 3 attempts: proving failed: boom"
    assert journal.partitions(job.id)[1] == PartitionRecord(  # on the GPU of its last attempt
        job.id, 1, PartitionState.FAILED, error=failed.error, gpu=1, completed_at=3.0,
        attempts=[Attempt(1, 1, "prove timed out after 300 s", 0, 1.0),
                  Attempt(1, 2, "proving failed: boom", 1, 2.0),
                  Attempt(1, 3, "proving failed: boom", 1, 3.0)],
    )  # fmt: skip
    assert [(a.attempt, a.at) for a in journal.failures(job.id, limit=2)] == [(3, 3.0), (2, 2.0)]
    assert journal.record_attempt(job.id, 2, "late", None, 3) == (0, failed)  # ended: as is


def test_attempts_of_a_partition_that_then_completed_stay_with_it(journal: AnyJournal) -> None:
    job = journal.add_job(2, None, {})
    journal.record_attempt(job.id, 0, "synthesis failed: no witness", None, 3)
    journal.complete_partitions([proved(job.id, 0)])
    part = journal.partitions(job.id)[0]
    assert part.state == "completed"
    assert [a.reason for a in part.attempts] == ["synthesis failed: no witness"]
    assert journal.record_attempt(job.id, 0, "stale", None, 3)[0] == 0  # completed: nothing
    assert journal.partitions(job.id)[1].attempts == []


def test_one_attempt_allowed_fails_the_job_at_the_first_failure(journal: AnyJournal) -> None:
    job = journal.add_job(1, None, {})
    number, failed = journal.record_attempt(job.id, 0, "verification failed", 0, 1)
    assert (number, failed.error) == (1, "partition 0 failed after 1 attempt: verification failed")


def test_fail_exhausted_fails_the_jobs_with_a_pending_partition_out_of_attempts(
    journal: AnyJournal,
) -> None:
    tried, fine, done = (journal.add_job(2, None, {}) for _ in range(3))
    for reason, gpu in (("a", None), ("b", 3)):
        journal.record_attempt(tried.id, 1, reason, gpu, 5)
    journal.record_attempt(fine.id, 0, "once", None, 5)
    journal.record_attempt(done.id, 0, "x", None, 5)
    journal.record_attempt(done.id, 0, "y", None, 5)
    journal.complete_partitions([proved(done.id, 0)])  # out of attempts, but it completed
    assert journal.fail_exhausted(3) == []
    (failed,) = journal.fail_exhausted(2)
    assert (failed.id, failed.error) == (tried.id, "partition 1 failed after 2 attempts: b")
    assert journal.partitions(tried.id)[1].gpu == 3  # the GPU of its last attempt
    assert [job.id for job, _ in journal.incomplete()] == [fine.id, done.id]


def test_prune_deletes_the_attempts_of_the_jobs_it_deletes(
    journal: AnyJournal, store: Store, clock: FakeClock
) -> None:
    old = journal.add_job(1, None, {})
    journal.record_attempt(old.id, 0, "boom", None, 1)
    kept = journal.add_job(1, None, {})
    journal.record_attempt(kept.id, 0, "boom", None, 3)
    clock.advance(100)
    assert journal.prune(retention_s=10) == 1
    assert store.ids_in("attempts") == [kept.id]


def test_probe_writes_nothing(journal: AnyJournal) -> None:
    job = journal.add_job(2, None, {})
    journal.probe()
    journal.check_file()
    assert journal.list_jobs() == [job]
    assert journal.counts()[JobState.QUEUED] == 1


def test_withdraw_deletes_a_job_with_its_rows_and_frees_its_key(
    journal: AnyJournal, store: Store
) -> None:
    kept = journal.add_job(1, None, {})
    job, created = journal.add_job_once("key-1", 3, None, {}, 0)
    assert created
    journal.complete_partitions([proved(job.id, 0)])
    journal.record_attempt(job.id, 1, "boom", None, 3)
    assert journal.withdraw(job.id)
    assert journal.get_job(job.id) is None
    assert store.ids_in("partitions") == []
    assert store.ids_in("attempts") == []
    assert [j.id for j in journal.list_jobs()] == [kept.id]
    assert not journal.withdraw(job.id)  # already gone
    again, created = journal.add_job_once("key-1", 3, None, {}, 0)
    assert created
    assert again.id != job.id
