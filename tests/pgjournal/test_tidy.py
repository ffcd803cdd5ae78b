"""The fleet's queue table vacuumed by the hosts as it churns, on a real PostgreSQL: past a
number of dead lease rows a renewal vacuums it, and a host never waits for another's vacuum."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from pacer.pgjournal import PgJournal, tidy
from pacer.pgjournal.tidy import queue_dead_rows, tidy_queue
from tests.pgjournal.database import churn, sql
from tests.waits import wait_until

pytestmark = pytest.mark.slow

DEAD = 60  # lease rows claimed and deleted by their commits


@pytest.fixture
def churned(postgres_url: str) -> Iterator[PgJournal]:
    """A journal whose queue table holds ``DEAD`` dead lease rows, as the server counts them."""
    with PgJournal.connect(postgres_url, host="tidy-a", lease_s=30) as journal:
        journal.add_job(DEAD * 2, None, {})
        churn(journal, "tidy-a", DEAD)
        # The server counts a session's writes when the session next goes idle.
        wait_until(
            lambda: queue_dead_rows(journal._pool) >= DEAD, "the server to count the dead rows"
        )
        yield journal


def vacuums(url: str) -> int:
    ((count,),) = sql(url, "SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'batches'")
    return int(str(count))


def test_below_the_threshold_the_queue_is_left_alone(churned: PgJournal, postgres_url: str) -> None:
    assert not tidy_queue(churned._pool, dead_rows=DEAD * 10)
    assert vacuums(postgres_url) == 0


def test_past_the_threshold_the_queue_is_vacuumed(churned: PgJournal, postgres_url: str) -> None:
    assert tidy_queue(churned._pool, dead_rows=DEAD)
    assert vacuums(postgres_url) == 1
    assert queue_dead_rows(churned._pool) < DEAD


def test_a_host_does_not_wait_for_another_vacuuming(churned: PgJournal, postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as other:
        # The lock a vacuum takes, held by another host's vacuum.
        other.execute("LOCK TABLE batches IN SHARE UPDATE EXCLUSIVE MODE")
        assert tidy_queue(churned._pool, dead_rows=DEAD)  # skipped at once, no wait
        assert vacuums(postgres_url) == 0
        other.rollback()
    assert tidy_queue(churned._pool, dead_rows=DEAD)
    assert vacuums(postgres_url) == 1


def test_a_renewal_vacuums_the_queue_past_the_threshold(
    churned: PgJournal, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tidy, "QUEUE_DEAD_ROWS", DEAD)
    tokens = [claim.token for claim in churned.claim("tidy-a", 1)]
    assert len(churned.renew("tidy-a", tokens)) == 1  # the renewal stands, and vacuumed
    assert vacuums(postgres_url) == 1


def queue_pages(url: str) -> int:
    ((pages,),) = sql(
        url, "SELECT pg_relation_size('batches') / current_setting('block_size')::int"
    )
    return int(str(pages))


def test_the_vacuum_leaves_the_queue_its_pages(churned: PgJournal, postgres_url: str) -> None:
    # Autovacuum leaves them (the table's option) ...
    assert sql(postgres_url, "SELECT reloptions FROM pg_class WHERE relname = 'batches'") == [
        (["fillfactor=50", "vacuum_truncate=false"],)
    ]
    # ... and so does a host's vacuum without it. Every lease row is dead once the job's runs
    # are gone: a truncating vacuum would cut the table back to its first page, and need the
    # table's exclusive lock to do it.
    sql(postgres_url, "ALTER TABLE batches RESET (vacuum_truncate)")
    sql(postgres_url, "DELETE FROM batches")
    wait_until(lambda: queue_dead_rows(churned._pool) >= DEAD, "the server to count the dead rows")
    pages = queue_pages(postgres_url)
    assert pages > 1
    assert tidy_queue(churned._pool, dead_rows=DEAD)
    assert vacuums(postgres_url) == 1
    assert queue_pages(postgres_url) == pages


def test_a_vacuum_the_server_skips_is_a_warning(
    churned: PgJournal, postgres_url: str, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # A host whose role neither owns the table nor the database: the server skips its
    # vacuum with a notice, which pacer turns into a warning (once in a while).
    role = f"tidy_guest_{uuid.uuid4().hex[:12]}"
    sql(postgres_url, f"CREATE ROLE {role} LOGIN")
    try:
        guest_url = postgres_url.replace(f"{urlsplit(postgres_url).username}@", f"{role}@", 1)
        monkeypatch.setattr(tidy, "_last_skipped_warning", -float("inf"))
        guest = ConnectionPool(
            guest_url, min_size=1, max_size=1, open=False, kwargs={"autocommit": True}
        )
        with guest, caplog.at_level(logging.WARNING, logger=tidy.__name__):
            assert not tidy_queue(guest, dead_rows=DEAD)
            assert not tidy_queue(guest, dead_rows=DEAD)
        assert vacuums(postgres_url) == 0
        skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
        assert len(skipped) == 1, skipped  # the second is not repeated
        assert "batches" in skipped[0]
        assert "owner" in skipped[0]
    finally:
        sql(postgres_url, f"DROP ROLE {role}")
