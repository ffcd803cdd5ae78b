"""What a claim reads, on a real PostgreSQL: its scan for lapsed leases reads the index on
``lease_until``, never every lease through the holders' index. (The claim before schema
version 9 passes this test too: it guards the query's form, which now names no column that
index serves; bench/RESULTS.md, "fleet: the claim's scan for lapsed leases, by lease time
alone".)"""

from __future__ import annotations

import psycopg
import pytest

from pacer.pgjournal import PgJournal
from tests.pgjournal.database import churn

pytestmark = pytest.mark.slow

CHURN = 1000  # leases claimed and committed, left as dead rows (no vacuum in between)
HELD = 20  # leases in flight


def test_a_claim_does_not_read_the_leases_through_their_holders(postgres_url: str) -> None:
    with PgJournal.connect(postgres_url, host="scan-a", lease_s=30) as journal:
        journal.add_job(CHURN + HELD + 10, None, {})
        churn(journal, "scan-a", CHURN)
        for _ in range(HELD):
            journal.claim("scan-b", 1)
    # The index scans of this transaction alone, counted by the server as they happen.
    with psycopg.connect(postgres_url) as conn:
        for _ in range(5):
            assert conn.execute("SELECT * FROM pacer_claim('scan-c', 1, 30)").fetchall()
        scans: dict[str, int] = dict(conn.execute(
            "SELECT relname, pg_stat_get_xact_numscans(oid) FROM pg_class"
            " WHERE relname IN ('batches_free', 'batches_by_holder', 'batches_by_lease')"
        ).fetchall())  # fmt: skip
        conn.rollback()
    assert scans["batches_free"] >= 5, scans
    assert scans["batches_by_holder"] == 0, scans
