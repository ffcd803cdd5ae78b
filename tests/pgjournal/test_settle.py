"""The sweep on a real PostgreSQL: a job whose last commit stored every result but lost its
count (the second transaction of ``pacer_commit``, rolled back here as a crash would) is
completed by the next host's upkeep, once, with the digest a commit would have given it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pacer.journal import result_digest
from pacer.pgjournal import PgJournal
from tests.journal.stores import proved
from tests.pgjournal.database import at_once, sql

pytestmark = pytest.mark.slow


@pytest.fixture
def journal(postgres_url: str) -> Iterator[PgJournal]:
    with PgJournal.connect(postgres_url, host="settle-a", lease_s=30) as journal:
        yield journal


def state(journal: PgJournal, job_id: str) -> tuple[str, int]:
    job = journal.get_job(job_id)
    assert job is not None
    return job.state, job.partitions_done


def lose_count(url: str, job_id: str, done: int, state: str = "running") -> None:
    """Undo the job row's update of the last commit: its results and progress rows stay."""
    sql(url, "UPDATE jobs SET state = %s, partitions_done = %s, result_digest = NULL"
             " WHERE id = %s", state, done, job_id)  # fmt: skip


def test_a_job_whose_last_count_was_lost_is_completed_by_the_sweep(
    journal: PgJournal, postgres_url: str
) -> None:
    job = journal.add_job(4, None, {})
    journal.complete_partitions([proved(job.id, i) for i in range(3)])
    (done,) = journal.complete_partitions([proved(job.id, 3)])
    lose_count(postgres_url, job.id, 3)
    assert state(journal, job.id) == ("running", 3)
    (settled,) = journal.settle()
    assert (settled.id, settled.state, settled.partitions_done) == (job.id, "completed", 4)
    assert settled.result_digest == done.result_digest
    assert settled.result_digest == result_digest(proved(job.id, i).digest for i in range(4))
    assert journal.get_job(job.id) == settled
    assert journal.settle() == []  # idempotent: nothing left to finish


def test_a_job_stored_in_one_commit_that_lost_it_is_completed_from_queued(
    journal: PgJournal, postgres_url: str
) -> None:
    job = journal.add_job(2, None, {})
    journal.complete_partitions([proved(job.id, 0), proved(job.id, 1)])
    lose_count(postgres_url, job.id, 0, "queued")
    sql(postgres_url, "INSERT INTO batches (job_id, priority, created_at, seq, first, start,"
                      " stop) SELECT id, priority, created_at, seq, 0, 0, 2 FROM jobs"
                      " WHERE id = %s", job.id)  # fmt: skip
    (settled,) = journal.settle()
    assert (settled.state, settled.partitions_done) == ("completed", 2)
    assert sql(postgres_url, "SELECT count(*) FROM batches WHERE job_id = %s", job.id) == [(0,)]
    assert journal.claim("settle-a", 10) == []


def test_a_count_behind_is_caught_up_and_unfinished_jobs_stay_running(
    journal: PgJournal, postgres_url: str
) -> None:
    job = journal.add_job(5, None, {})
    other = journal.add_job(3, None, {})
    journal.complete_partitions([proved(job.id, i) for i in range(3)])
    lose_count(postgres_url, job.id, 1)
    assert journal.settle() == []
    assert state(journal, job.id) == ("running", 3)
    assert state(journal, other.id) == ("queued", 0)  # no progress: untouched


def test_hosts_sweeping_at_once_complete_a_job_once(journal: PgJournal, postgres_url: str) -> None:
    jobs = [journal.add_job(3, None, {}) for _ in range(6)]
    for job in jobs:
        journal.complete_partitions([proved(job.id, i) for i in range(3)])
        lose_count(postgres_url, job.id, 2)
    hosts = [PgJournal.connect(postgres_url, host=f"settle-{i}") for i in range(4)]
    try:
        swept = at_once(4, lambda i: hosts[i].settle())
    finally:
        for host in hosts:
            host.close()
    ids = sorted(job.id for batch in swept for job in batch)
    assert ids == sorted(job.id for job in jobs)  # each completed by exactly one host
    assert {state(journal, job.id) for job in jobs} == {("completed", 3)}
