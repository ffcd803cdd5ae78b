"""The fleet's queue in the PostgreSQL journal: claims, leases, reclaims, release, and results
stored once, with several hosts and threads on a real server. Leases run out by moving
``lease_until`` in the database, but for one short real lease."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from pacer.journal import JobState, result_digest
from pacer.pgjournal import (
    MAX_CLAIM,
    Claim,
    PgJournal,
)
from pacer.pgjournal.schema import LANES
from tests.journal.stores import current, proved
from tests.pgjournal.database import at_once, expire, sql, terminate
from tests.waits import wait_until

pytestmark = pytest.mark.slow


def taken(claims: list[Claim]) -> list[tuple[str, list[tuple[int, int]]]]:
    return [(c.job_id, c.pending.runs()) for c in claims]


@pytest.fixture
def journal(postgres_url: str) -> Iterator[PgJournal]:
    with PgJournal.connect(postgres_url, host="host-a", lease_s=30) as journal:
        yield journal


# -- claims -----------------------------------------------------------------------------------
def test_claims_follow_priority_then_age_then_index_across_jobs_and_hosts(
    journal: PgJournal,
) -> None:
    old = journal.add_job(3, None, {})
    urgent = journal.add_job(2, None, {}, priority=5)
    new = journal.add_job(4, None, {})
    assert taken(journal.claim("host-a", 3)) == [(urgent.id, [(0, 2)]), (old.id, [(0, 1)])]
    assert taken(journal.claim("host-b", 1)) == [(old.id, [(1, 2)])]
    late_urgent = journal.add_job(1, None, {}, priority=9)
    assert taken(journal.claim("host-b", 10)) == [
        (late_urgent.id, [(0, 1)]), (old.id, [(2, 3)]), (new.id, [(0, 4)])
    ]  # fmt: skip
    assert journal.claim("host-a", 10) == []  # all held
    held = {(lease.job_id, lease.host, lease.start, lease.stop) for lease in journal.leases()}
    assert (urgent.id, "host-a", 0, 2) in held
    assert (new.id, "host-b", 0, 4) in held
    assert all(29 < lease.expires_in_s <= 30 for lease in journal.leases())


def test_a_job_of_a_million_partitions_is_a_few_runs_not_a_row_each(
    journal: PgJournal, postgres_url: str
) -> None:
    big = journal.add_job(1_000_000, None, {})
    rows = sql(postgres_url, "SELECT count(*) FROM batches WHERE job_id = %s", big.id)
    assert rows == [(LANES,)]
    (claim,) = journal.claim("host-a", MAX_CLAIM)
    assert claim.pending.runs() == [(0, MAX_CLAIM)]
    rows = sql(postgres_url, "SELECT count(*) FROM batches WHERE job_id = %s", big.id)
    assert rows == [(LANES + 1,)]  # the lease, and the rest of its lane


def test_a_claimer_passes_the_runs_another_claim_holds(
    journal: PgJournal, postgres_url: str
) -> None:
    big = journal.add_job(16_000, None, {})
    with psycopg.connect(postgres_url) as other:  # a claim in progress, holding lane 0
        other.execute("SELECT id FROM batches WHERE start = 0 FOR UPDATE")
        assert taken(journal.claim("host-a", 5)) == [(big.id, [(1000, 1005)])]
    assert taken(journal.claim("host-a", 5)) == [(big.id, [(0, 5)])]


@pytest.mark.parametrize("n", [0, MAX_CLAIM + 1, 2.0, True], ids=["zero", "huge", "float", "bool"])
def test_claim_refuses_a_bad_count(journal: PgJournal, n: object) -> None:
    with pytest.raises(ValueError, match="a claim takes from 1 to 10000 partitions"):
        journal.claim("host-a", n)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="host must be a non-empty name"):
        journal.claim("", 1)


def test_concurrent_claimers_never_get_the_same_partition(postgres_url: str) -> None:
    with PgJournal.connect(postgres_url) as journal:
        jobs = [journal.add_job(size, None, {}, priority=size % 3) for size in (3000, 700, 41)]
    total = sum(job.partitions for job in jobs)
    claimed: list[tuple[str, int]] = []
    lock = threading.Lock()

    def claimer(i: int) -> int:
        rounds = 0
        with PgJournal.connect(postgres_url, host=f"host-{i}") as journal:
            while len(claimed) < total and rounds < 2000:
                rounds += 1
                got = [
                    (c.job_id, index)
                    for c in journal.claim(f"host-{i}", 1 + 9 * i)
                    for index in c.pending
                ]
                with lock:
                    claimed.extend(got)
        return rounds

    at_once(6, claimer)
    assert len(claimed) == total
    assert set(claimed) == {(job.id, i) for job in jobs for i in range(job.partitions)}


# -- leases -----------------------------------------------------------------------------------
def test_an_expired_lease_is_reclaimed_with_only_its_partitions_without_results(
    journal: PgJournal, postgres_url: str
) -> None:
    job = journal.add_job(10, None, {})
    (first,) = journal.claim("host-a", 10)
    journal.complete_partitions([proved(job.id, i) for i in (0, 1, 2, 7)])
    assert journal.claim("host-b", 10) == []  # held by host-a
    expire(postgres_url, "host-a")
    (again,) = journal.claim("host-b", 10)
    assert (again.batch, again.reclaimed_from) == (first.batch, "host-a")
    assert again.pending.runs() == [(3, 7), (8, 10)]
    assert journal.renew("host-a", [first.token]) == []  # it lost them
    assert journal.renew("host-b", [again.token]) == [again.token]
    assert [(lease.host, lease.start, lease.stop) for lease in journal.leases(job.id)] == [
        ("host-b", 0, 10)
    ]


def test_a_reclaim_takes_at_most_n_and_leaves_the_rest_free(
    journal: PgJournal, postgres_url: str
) -> None:
    job = journal.add_job(64, None, {})
    journal.claim("host-a", 64)
    journal.complete_partitions([proved(job.id, i) for i in range(0, 10, 2)])
    expire(postgres_url, "host-a")
    (claim,) = journal.claim("host-b", 6)
    assert claim.pending.runs() == [(1, 2), (3, 4), (5, 6), (7, 8), (9, 11)]
    assert taken(journal.claim("host-c", 4)) == [(job.id, [(11, 15)])]
    assert taken(journal.claim("host-c", 100)) == [(job.id, [(15, 64)])]


def test_a_lease_runs_on_the_database_clock(postgres_url: str) -> None:
    with PgJournal.connect(postgres_url, host="host-a", lease_s=0.2) as journal:
        job = journal.add_job(2, None, {})
        journal.claim("host-a", 2)
        assert journal.claim("host-b", 2) == []
        claimed = wait_until(lambda: taken(journal.claim("host-b", 2)), "host-a's lease to end")
        assert claimed == [(job.id, [(0, 2)])]


def test_renew_extends_a_hosts_leases_and_drops_those_of_ended_jobs(
    journal: PgJournal, postgres_url: str
) -> None:
    kept = journal.add_job(2, None, {}, priority=1)
    cancelled = journal.add_job(2, None, {})
    tokens = [claim.token for claim in journal.claim("host-a", 4)]
    journal.claim("host-b", 1)  # nothing left
    sql(postgres_url, "UPDATE batches SET lease_until = now() + interval '1 s'")
    journal.cancel(cancelled.id)
    assert journal.renew("host-a", tokens) == tokens[:1]
    (lease,) = journal.leases()
    assert (lease.job_id, lease.host) == (kept.id, "host-a")
    assert 29 < lease.expires_in_s <= 30
    assert journal.claim("host-b", 4) == []  # a cancelled job is claimed no more


def test_renew_extends_only_the_leases_named_by_their_tokens(
    journal: PgJournal, postgres_url: str
) -> None:
    job = journal.add_job(2, None, {})
    first, second = (journal.claim("host-a", 1)[0] for _ in range(2))
    sql(postgres_url, "UPDATE batches SET lease_until = now() + interval '1 s'")
    assert journal.renew("host-a", [second.token, first.token + 10**6]) == [second.token]
    leases = {lease.start: lease.expires_in_s for lease in journal.leases(job.id)}
    assert leases[0] <= 1 < 29 < leases[1]  # the lease not named runs out as it was


def test_release_gives_back_at_once_what_a_host_did_not_prove(journal: PgJournal) -> None:
    job = journal.add_job(10, None, {})
    journal.claim("host-a", 5)
    journal.complete_partitions([proved(job.id, 0), proved(job.id, 1)])
    assert journal.release("host-a") == 5
    assert journal.leases() == []
    assert taken(journal.claim("host-b", 10)) == [(job.id, [(2, 5)]), (job.id, [(5, 10)])]
    assert journal.release("host-a") == 0


def test_release_keeps_the_leases_named_by_their_tokens(journal: PgJournal) -> None:
    job = journal.add_job(4, None, {})
    first, second = (journal.claim("host-a", 2)[0] for _ in range(2))
    assert journal.release("host-a", keep=[first.token]) == 2
    assert [(lease.start, lease.host) for lease in journal.leases(job.id)] == [(0, "host-a")]
    [claim] = journal.claim("host-b", 4)  # at once, not reclaimed
    assert (claim.pending.runs(), claim.reclaimed_from) == ([(2, 4)], None)
    assert journal.release("host-a", keep=[first.token, second.token]) == 0


def test_runs_whose_partitions_all_have_results_leave_the_queue(
    journal: PgJournal, postgres_url: str
) -> None:
    job = journal.add_job(20, None, {})
    journal.claim("host-a", 8)
    (b,) = journal.claim("host-b", 8)
    journal.complete_partitions([proved(job.id, i) for i in range(8)])  # host-a's run
    assert [lease.host for lease in journal.leases(job.id)] == ["host-b"]
    journal.complete_partitions([proved(job.id, i) for i in range(8, 20)])
    assert sql(postgres_url, "SELECT count(*) FROM batches") == [(0,)]
    assert journal.renew("host-b", [b.token]) == []


# -- exactly once -----------------------------------------------------------------------------
def test_a_job_completes_exactly_once_under_concurrent_completers(postgres_url: str) -> None:
    with PgJournal.connect(postgres_url) as journal:
        jobs = [journal.add_job(120, None, {}) for _ in range(3)]

    def completer(i: int) -> list[str]:
        results = [proved(job.id, index) for job in jobs for index in range(job.partitions)]
        random.Random(i).shuffle(results)
        ended: list[str] = []
        with PgJournal.connect(postgres_url, host=f"host-{i}") as journal:
            for start in range(0, len(results), 25):
                ended += [
                    job.id for job in journal.complete_partitions(results[start : start + 25])
                ]
        return ended

    ended = [job_id for each in at_once(4, completer) for job_id in each]
    assert sorted(ended) == sorted(job.id for job in jobs)
    with PgJournal.connect(postgres_url) as journal:
        for job in jobs:
            done = current(journal, job.id)
            assert (done.state, done.partitions_done) == (JobState.COMPLETED, 120)
            assert done.result_digest == result_digest(f"d{i}" for i in range(120))


def test_one_idempotency_key_taken_by_hosts_at_once_makes_one_job(postgres_url: str) -> None:
    PgJournal.connect(postgres_url).close()

    def submit(i: int) -> tuple[str, bool]:
        with PgJournal.connect(postgres_url, host=f"host-{i}") as journal:
            job, created = journal.add_job_once("key-1", 5, "w", {"seed": 3})
            return job.id, created

    answers = at_once(4, submit)
    assert len({job_id for job_id, _ in answers}) == 1
    assert sorted(created for _, created in answers) == [False, False, False, True]


# -- faults -----------------------------------------------------------------------------------
def test_a_lost_connection_fails_one_call_and_the_next_connects_again(
    journal: PgJournal, postgres_url: str
) -> None:
    journal.probe()
    assert terminate(postgres_url, "true") >= 1  # the journal pool's connections
    with pytest.raises(PgJournal.OperationalError):
        journal.probe()
    journal.probe()


def test_a_database_too_slow_fails_a_call_at_the_timeout(postgres_url: str) -> None:
    with PgJournal.connect(postgres_url, timeout_s=0.1) as journal:
        job = journal.add_job(1, None, {})
        with psycopg.connect(postgres_url) as other:
            other.execute("SELECT * FROM jobs FOR UPDATE")
            with pytest.raises(PgJournal.OperationalError, match="statement timeout"):
                journal.complete_partitions([proved(job.id, 0)])
        assert journal.complete_partitions([proved(job.id, 0)]) != []


def test_a_fleet_proves_every_job_exactly_once_though_a_host_dies_holding_work(
    postgres_url: str,
) -> None:
    with PgJournal.connect(postgres_url) as journal:
        jobs = [journal.add_job(300, None, {}, priority=i % 2) for i in range(5)]
        dead = journal.claim("host-dead", 40)  # claimed, then the host is gone
    assert sum(len(claim.pending) for claim in dead) == 40
    left = threading.Event()  # set when the living hosts find nothing more to claim

    def host(i: int) -> list[str]:
        ended: list[str] = []
        with PgJournal.connect(postgres_url, host=f"host-{i}") as journal:
            while True:
                claims = journal.claim(f"host-{i}", 16)
                if not claims:
                    if journal.incomplete() == [] or left.is_set():
                        return ended
                    left.set()
                    continue
                results = [proved(c.job_id, index) for c in claims for index in c.pending]
                ended += [job.id for job in journal.complete_partitions(results)]

    with ThreadPoolExecutor(2) as pool:
        first = list(pool.map(host, range(2)))
    assert left.is_set()  # the dead host's 40 were held: the others ran dry
    expire(postgres_url, "host-dead")  # its lease runs out
    second = at_once(2, host)
    ended = [job_id for each in first + second for job_id in each]
    assert sorted(ended) == sorted(job.id for job in jobs)
    with PgJournal.connect(postgres_url) as journal:
        assert journal.incomplete() == []
        assert journal.leases() == []
        for job in jobs:
            assert current(journal, job.id).result_digest == result_digest(
                f"d{i}" for i in range(300)
            )


def test_a_lease_that_outlived_its_job_is_dropped_not_handed_out(
    journal: PgJournal, postgres_url: str
) -> None:
    gone, kept = journal.add_job(8, None, {}, priority=1), journal.add_job(8, None, {})
    journal.cancel(gone.id)
    for host, lease in (
        ("host-a", "now() + interval '1 min'"),
        ("host-b", "now() - interval '1 s'"),
    ):
        # As a claim taken while its job was cancelled leaves it (after the job's runs went).
        sql(
            postgres_url,
            "INSERT INTO batches (job_id, priority, created_at, seq, first, start, stop,"
            f" claimed_by, lease_until) VALUES (%s, 1, 0, 0, 0, 0, 8, %s, {lease})",
            gone.id,
            host,
        )
    assert journal.release("host-a") == 0  # dropped, not given back
    assert taken(journal.claim("host-c", 16)) == [(kept.id, [(0, 8)])]  # host-b's: dropped
    assert [lease.job_id for lease in journal.leases()] == [kept.id]
