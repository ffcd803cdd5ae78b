"""Fenced leases and one-statement commits on a real PostgreSQL: a result is stored only under a
lease its host still holds with the token it was claimed with; a commit updates the job's row
without touching an index; pacer's sessions end a transaction left idle, so a frozen host
holds no lock for long; and a lease does not lapse while the server restarts."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from pacer.journal import LeaseToken, PartitionResult
from pacer.pgjournal import Claim, PgJournal
from pacer.pgjournal.database import KEEPALIVE_IDLE_S, open_pool
from tests.conftest import running_postgres
from tests.journal.stores import proved
from tests.pgjournal.database import expire, sql
from tests.waits import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def journal(postgres_url: str) -> Iterator[PgJournal]:
    with PgJournal.connect(postgres_url, host="host-a", lease_s=30) as journal:
        yield journal


def under(claim: Claim, index: int) -> PartitionResult:
    """``proved`` under ``claim``'s lease."""
    result = proved(claim.job_id, index)
    return PartitionResult(result.job_id, index, result.digest, result.synthesis_s,
                           result.gpu_s, lease=LeaseToken(claim.batch, claim.token))  # fmt: skip


def stored(url: str, job_id: str) -> list[int]:
    rows = sql(url, "SELECT idx FROM partitions WHERE job_id = %s ORDER BY idx", job_id)
    return [int(str(idx)) for (idx,) in rows]


def test_a_result_under_a_lease_taken_by_another_host_is_not_stored(
    journal: PgJournal, postgres_url: str
) -> None:
    job = journal.add_job(6, None, {})
    (mine,) = journal.claim("host-a", 6)
    journal.complete_partitions([under(mine, 0)])
    expire(postgres_url, "host-a")  # host-a froze past its lease
    with PgJournal.connect(postgres_url, host="host-b") as other:
        (theirs,) = other.claim("host-b", 6)
        assert (theirs.batch, theirs.reclaimed_from) == (mine.batch, "host-a")
        assert theirs.token != mine.token
        # host-a resumes and commits what it proved meanwhile: refused, nothing stored.
        assert journal.complete_partitions([under(mine, i) for i in (1, 2)]) == []
        assert journal.refused_results == 2
        assert stored(postgres_url, job.id) == [0]
        (done,) = other.complete_partitions([under(theirs, i) for i in range(1, 6)])
    assert (done.state, done.partitions_done) == ("completed", 6)
    assert stored(postgres_url, job.id) == list(range(6))


def test_a_result_under_a_lost_lease_is_refused_even_once_its_job_completed(
    journal: PgJournal, postgres_url: str
) -> None:
    job = journal.add_job(3, None, {})
    (mine,) = journal.claim("host-a", 3)
    expire(postgres_url, "host-a")  # host-a froze past its lease
    with PgJournal.connect(postgres_url, host="host-b") as other:
        (theirs,) = other.claim("host-b", 3)
        (done,) = other.complete_partitions([under(theirs, i) for i in range(3)])
    assert (done.id, done.state) == (job.id, "completed")
    # host-a resumes and commits what it proved meanwhile: the job is done, and host-a's
    # results are refused (counted), not dropped unseen.
    assert journal.complete_partitions([under(mine, 0), under(mine, 1)]) == []
    assert journal.refused_results == 2
    assert stored(postgres_url, job.id) == [0, 1, 2]


def test_a_lapsed_lease_no_one_took_still_stores_its_results(
    journal: PgJournal, postgres_url: str
) -> None:
    job = journal.add_job(2, None, {})
    (mine,) = journal.claim("host-a", 2)
    expire(postgres_url, "host-a")
    (done,) = journal.complete_partitions([under(mine, 0), under(mine, 1)])
    assert (done.id, journal.refused_results) == (job.id, 0)
    with PgJournal.connect(postgres_url, host="host-b") as other:
        assert other.claim("host-b", 2) == []  # stored, and the job's runs gone


def test_a_token_of_an_earlier_claim_of_the_same_run_is_refused(
    journal: PgJournal, postgres_url: str
) -> None:
    job = journal.add_job(3, None, {})
    (first,) = journal.claim("host-a", 3)
    journal.release("host-a")  # given back, then claimed again by the same host
    (second,) = journal.claim("host-a", 3)
    assert second.batch == first.batch
    assert second.token != first.token
    assert journal.complete_partitions([under(first, 0)]) == []
    assert journal.refused_results == 1
    journal.complete_partitions([under(second, 0)])
    assert stored(postgres_url, job.id) == [0]


def test_a_commit_updates_the_jobs_row_without_an_index_entry(
    journal: PgJournal, postgres_url: str
) -> None:
    job = journal.add_job(40, None, {})
    (claim,) = journal.claim("host-a", 40)
    journal.complete_partitions([under(claim, 0)])  # queued → running: indexed columns change
    for i in range(1, 31):
        journal.complete_partitions([under(claim, i)])

    def hot() -> tuple[int, int]:
        [(updates, hot_updates)] = sql(
            postgres_url, "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
            " WHERE relname = 'jobs'")  # fmt: skip
        return int(str(updates)), int(str(hot_updates))

    # The statistics reach the view a moment after the commits.
    updates, hot_updates = wait_until(hot, "the jobs' updates counted", done=lambda n: n[0] >= 31)
    assert hot_updates >= 30, f"{hot_updates} of {updates} job updates were HOT"
    assert journal.get_job(job.id).partitions_done == 31  # type: ignore[union-attr]


def test_pacers_sessions_bound_locks_idle_transactions_and_silent_peers(
    postgres_url: str,
) -> None:
    pool = open_pool(postgres_url, timeout_s=4)
    with pool, pool.connection() as conn:
        shown = {name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
                 for name in ("statement_timeout", "lock_timeout",
                              "idle_in_transaction_session_timeout")}  # fmt: skip
        assert conn.info.get_parameters()["keepalives_idle"] == str(KEEPALIVE_IDLE_S)
    assert shown == {"statement_timeout": "4s", "lock_timeout": "4s",
                     "idle_in_transaction_session_timeout": "2s"}  # fmt: skip


def test_a_session_left_idle_holding_a_jobs_row_is_ended_and_commits_go_on(
    postgres_url: str,
) -> None:
    frozen = open_pool(postgres_url, timeout_s=2)
    with frozen, PgJournal.connect(postgres_url, host="healthy", timeout_s=2) as healthy:
        job = healthy.add_job(2, None, {})
        with frozen.connection() as conn:
            conn.execute("BEGIN")
            conn.execute("SELECT * FROM jobs WHERE id = %s FOR NO KEY UPDATE", (job.id,))
            # The host freezes here, inside its transaction: the server ends the session
            # after 1 s idle, and the healthy host's commit, waiting on the row, goes through.
            (done,) = healthy.complete_partitions([proved(job.id, 0), proved(job.id, 1)])
            assert done.state == "completed"
            with pytest.raises(psycopg.Error, match="idle-in-transaction timeout"):
                conn.execute("SELECT 1")  # the frozen host wakes: its session is gone


def test_a_lease_renewed_before_a_server_restart_lapses_only_a_lease_after_the_start() -> None:
    with running_postgres() as server:
        url = server.create_database()
        with PgJournal.connect(url, host="host-a", lease_s=1) as journal:
            journal.add_job(4, None, {})
            (mine,) = journal.claim("host-a", 2)
            server.halt()  # host-a cannot renew while the server is down
            server.resume()
        with PgJournal.connect(url, host="host-a", lease_s=1) as journal:  # connected again

            def lapsed() -> bool:
                rows = sql(url, "SELECT lease_until < now() FROM batches WHERE id = %s",
                           mine.batch)  # fmt: skip
                return bool(rows[0][0])

            wait_until(lapsed, "host-a's lease to run out on the database's clock")
            with PgJournal.connect(url, host="host-b", lease_s=60) as other:
                # Its holder gets a lease's time (60 s) from the start to renew it: not taken,
                # only the partitions never handed out are.
                assert [c.reclaimed_from for c in other.claim("host-b", 4)] == [None]
                # A lease claimed after the start lapses as usual.
                later = journal.add_job(1, None, {})
                journal.claim("host-a", 1)
                expire(url, "host-a")
                (taken,) = other.claim("host-b", 4)
                assert (taken.job_id, taken.reclaimed_from) == (later.id, "host-a")
            with PgJournal.connect(url, host="host-c", lease_s=1) as third:
                # With a lease of 1 s, the grace is over a second after the start.
                claims = wait_until(lambda: third.claim("host-c", 4),
                                    "the lease taken after its grace")  # fmt: skip
                assert [(c.batch, c.reclaimed_from) for c in claims] == [(mine.batch, "host-a")]


def test_a_commit_retried_after_its_count_was_lost_completes_the_job(
    journal: PgJournal, postgres_url: str
) -> None:
    job = journal.add_job(2, None, {})
    journal.complete_partitions([proved(job.id, 0)])
    # The first transaction of the last commit stored its result and counted it on the host's
    # progress row; its second, which sums the rows into the job, was lost (a crash).
    sql(postgres_url, "INSERT INTO partitions (job_id, idx, state, phases, digest, completed_at)"
                      " VALUES (%s, 1, 'completed', '{}', 'd1', 0)", job.id)  # fmt: skip
    sql(postgres_url, "UPDATE job_progress SET done = done + 1 WHERE job_id = %s", job.id)
    assert journal.get_job(job.id).partitions_done == 1  # type: ignore[union-attr]
    (done,) = journal.complete_partitions([proved(job.id, 1)])  # the host retries it
    assert (done.id, done.state, done.partitions_done) == (job.id, "completed", 2)


def test_commits_of_one_job_from_many_hosts_count_on_rows_of_their_own(
    journal: PgJournal, postgres_url: str
) -> None:
    job = journal.add_job(6, None, {})
    for host, indices in (("host-a", (0, 1)), ("host-b", (2,)), ("host-c", (3, 4))):
        with PgJournal.connect(postgres_url, host=host) as other:
            other.complete_partitions([proved(job.id, i) for i in indices])
    rows = sql(postgres_url, "SELECT host, done FROM job_progress WHERE job_id = %s"
                             " ORDER BY host", job.id)  # fmt: skip
    assert rows == [("host-a", 2), ("host-b", 1), ("host-c", 2)]
    assert journal.get_job(job.id).partitions_done == 5  # type: ignore[union-attr]


def test_after_the_fleet_could_not_reach_the_server_a_lease_lapses_only_a_lease_later(
    journal: PgJournal, postgres_url: str
) -> None:
    job = journal.add_job(4, None, {})
    (mine,) = journal.claim("host-a", 2)
    # No host reached the server for a minute (a failover to a standby, a network cut): the
    # server ran all along, so its start time cannot tell.
    sql(postgres_url, "UPDATE fleet_clock SET seen_at = now() - interval '60 s'")
    expire(postgres_url, "host-a")
    with PgJournal.connect(postgres_url, host="host-b", lease_s=30) as other:
        # The first call after the gap sees it: host-a gets a lease's time to renew.
        assert [c.reclaimed_from for c in other.claim("host-b", 4)] == [None]
        [(back,)] = sql(postgres_url, "SELECT now() - back_at < interval '30 s' FROM fleet_clock")
        assert back
        assert [c.reclaimed_from for c in other.claim("host-b", 4)] == []
        # A lease's time after the fleet came back, the lease lapses as usual.
        sql(postgres_url, "UPDATE fleet_clock SET back_at = now() - interval '31 s'")
        (taken,) = other.claim("host-b", 4)
        assert (taken.job_id, taken.batch, taken.reclaimed_from) == (job.id, mine.batch, "host-a")


def test_a_renewal_keeps_the_fleet_seen(journal: PgJournal, postgres_url: str) -> None:
    sql(postgres_url, "UPDATE fleet_clock SET seen_at = now() - interval '20 s'")
    journal.renew("host-a", [])  # 20 s is more than a quarter of the 30 s lease: recorded
    [(fresh, gap)] = sql(
        postgres_url,
        "SELECT now() - seen_at < interval '5 s', back_at > '-infinity' FROM fleet_clock",
    )
    assert (fresh, gap) == (True, True)  # and 20 s is more than half: a gap, ended now


def test_the_fleets_clock_starts_again_when_its_row_is_gone(
    journal: PgJournal, postgres_url: str
) -> None:
    journal.add_job(2, None, {})
    (mine,) = journal.claim("host-a", 1)
    sql(postgres_url, "DELETE FROM fleet_clock")
    expire(postgres_url, "host-a")
    with PgJournal.connect(postgres_url, host="host-b", lease_s=30) as other:
        # The first call after puts the row back, as a gap ended now: host-a gets its grace.
        assert [c.reclaimed_from for c in other.claim("host-b", 2)] == [None]
        assert sql(postgres_url, "SELECT count(*) FROM fleet_clock") == [(1,)]
        sql(postgres_url, "UPDATE fleet_clock SET back_at = now() - interval '31 s'")
        (taken,) = other.claim("host-b", 2)
        assert (taken.batch, taken.reclaimed_from) == (mine.batch, "host-a")


def done_count(url: str, job_id: str) -> tuple[str, int]:
    ((state, done),) = sql(url, "SELECT state, partitions_done FROM jobs WHERE id = %s", job_id)
    return str(state), int(str(done))


def test_commits_of_a_running_job_do_not_queue_on_its_row(
    journal: PgJournal, postgres_url: str
) -> None:
    job = journal.add_job(4, None, {})
    (claim,) = journal.claim("host-a", 4)
    journal.complete_partitions([under(claim, 0)])
    assert done_count(postgres_url, job.id) == ("running", 1)
    with psycopg.connect(postgres_url) as holder:  # another commit counting the job
        holder.execute("SELECT 1 FROM jobs WHERE id = %s FOR NO KEY UPDATE", (job.id,))
        # Stored at once, without waiting for the row (a wait would end in lock_timeout); the
        # count is left to the commit that holds the row, or to the next.
        journal.complete_partitions([under(claim, 1), under(claim, 2)])
        assert stored(postgres_url, job.id) == [0, 1, 2]
        assert done_count(postgres_url, job.id) == ("running", 1)
        # The last result completes the job: that commit waits for the row.
        with ThreadPoolExecutor(1) as pool:
            last = pool.submit(journal.complete_partitions, [under(claim, 3)])
            wait_until(
                lambda: sql(postgres_url, "SELECT count(*) FROM pg_stat_activity"
                            " WHERE wait_event_type = 'Lock'"
                            " AND datname = current_database()")[0][0],
                "the last commit waiting for the job's row",
            )  # fmt: skip
            assert not last.done()
            holder.rollback()
            (done,) = last.result(timeout=30)
    assert (done.state, done.partitions_done) == ("completed", 4)
