"""Packing on a real PostgreSQL: a completed job's partition rows folded into one row answer
as they did (the job, its pages, its digests), jobs not completed keep their rows, hosts
packing at once pack a job once, and pruning deletes the packs."""

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
    with PgJournal.connect(postgres_url, host="packs-a", lease_s=30) as journal:
        yield journal


def rows(url: str, table: str, job_id: str) -> int:
    ((count,),) = sql(url, f"SELECT count(*) FROM {table} WHERE job_id = %s", job_id)
    return int(str(count))


def test_a_packed_job_answers_as_its_rows_did(journal: PgJournal, postgres_url: str) -> None:
    job = journal.add_job(7, None, {})
    journal.complete_partitions([proved(job.id, i) for i in (3, 0, 6)])
    (done,) = journal.complete_partitions([proved(job.id, i) for i in (1, 2, 4, 5)])
    before = (journal.get_job(job.id), journal.partitions(job.id),
              [journal.partition_page(job.id, o, 3) for o in range(0, 8, 2)],
              journal.partition_summary(job.id))  # fmt: skip
    assert journal.pack() == 1
    assert (rows(postgres_url, "partitions", job.id), rows(postgres_url, "partition_packs",
                                                            job.id)) == (0, 1)  # fmt: skip
    after = (journal.get_job(job.id), journal.partitions(job.id),
             [journal.partition_page(job.id, o, 3) for o in range(0, 8, 2)],
             journal.partition_summary(job.id))  # fmt: skip
    assert after == before
    digests = [p.digest for p in journal.partitions(job.id)]
    assert digests == [proved(job.id, i).digest for i in range(7)]
    assert result_digest(d for d in digests if d) == done.result_digest
    assert journal.pack() == 0  # idempotent: nothing left to pack


def test_jobs_not_completed_keep_their_rows(journal: PgJournal, postgres_url: str) -> None:
    running = journal.add_job(3, None, {})
    journal.complete_partitions([proved(running.id, 0)])
    failed = journal.add_job(3, None, {})
    journal.complete_partitions([proved(failed.id, 0)])
    journal.fail_partition(failed.id, 1, "out of memory")
    cancelled = journal.add_job(2, None, {})
    journal.complete_partitions([proved(cancelled.id, 0)])
    journal.cancel(cancelled.id)
    assert journal.pack() == 0
    for job, kept in ((running, 1), (failed, 2), (cancelled, 1)):
        assert (rows(postgres_url, "partitions", job.id), rows(postgres_url, "partition_packs",
                                                                job.id)) == (kept, 0)  # fmt: skip


def test_hosts_packing_at_once_pack_each_job_once(journal: PgJournal, postgres_url: str) -> None:
    jobs = [journal.add_job(4, None, {}) for _ in range(8)]
    for job in jobs:
        journal.complete_partitions([proved(job.id, i) for i in range(4)])
    pages = [journal.partitions(job.id) for job in jobs]
    hosts = [PgJournal.connect(postgres_url, host=f"packs-{i}") for i in range(4)]
    try:
        packed = at_once(4, lambda i: hosts[i].pack(3))
    finally:
        for host in hosts:
            host.close()
    assert sum(packed) + journal.pack() == len(jobs)
    assert [journal.partitions(job.id) for job in jobs] == pages
    assert sql(postgres_url, "SELECT count(*), count(DISTINCT job_id) FROM partition_packs") == [
        (8, 8)]  # fmt: skip


def test_pruning_deletes_a_packed_job(journal: PgJournal, postgres_url: str) -> None:
    job = journal.add_job(2, None, {})
    journal.complete_partitions([proved(job.id, 0), proved(job.id, 1)])
    assert journal.pack() == 1
    assert journal.prune(0.0, now=journal.now() + 1.0) == 1
    assert rows(postgres_url, "partition_packs", job.id) == 0
    assert journal.get_job(job.id) is None
