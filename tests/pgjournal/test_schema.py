"""The PostgreSQL journal's schema: created on an empty database, migrated once however many
hosts start at once, refused when a newer pacer wrote it."""

from __future__ import annotations

import psycopg
import pytest

from pacer.pgjournal import SCHEMA_VERSION, NewerDatabaseSchemaError, PgJournal, migrate
from pacer.pgjournal.schema import MIGRATIONS, schema_version
from tests.pgjournal.database import at_once, sql

pytestmark = pytest.mark.slow


def test_migrate_creates_the_schema_on_an_empty_database_and_a_rerun_changes_nothing(
    postgres_url: str,
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert schema_version(conn) == 0
        assert migrate(conn) == 0
        assert schema_version(conn) == SCHEMA_VERSION
    with PgJournal.connect(postgres_url) as journal:
        job = journal.add_job(3, "w", {})
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert migrate(conn) == SCHEMA_VERSION  # found current: nothing to do
    with PgJournal.connect(postgres_url) as journal:
        assert journal.get_job(job.id) == job
    tables = sql(postgres_url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    assert sorted(str(t) for (t,) in tables) == [
        "attempts", "batches", "estimates", "fleet_clock", "job_progress", "jobs", "pacer_schema",
        "partition_packs", "partitions", "workload_estimates",
    ]  # fmt: skip


def test_a_version_1_database_gains_the_workload_estimates(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn, conn.transaction():
        conn.execute("CREATE TABLE pacer_schema (one boolean PRIMARY KEY DEFAULT true"
                     " CHECK (one), version integer NOT NULL)")  # fmt: skip
        for statement in MIGRATIONS[1]:
            conn.execute(statement)
        conn.execute("INSERT INTO pacer_schema (version) VALUES (1)")
    with PgJournal.connect(postgres_url) as journal:
        assert journal.load_workload_estimates() == {}
        journal.save_workload_estimates("zk/a", {"gpu_service_s": 0.5, "synthesis_s": 4.0})
    assert sql(postgres_url, "SELECT version FROM pacer_schema") == [(SCHEMA_VERSION,)]
    with PgJournal.connect(postgres_url) as journal:
        assert journal.load_workload_estimates() == {
            "zk/a": {"gpu_service_s": 0.5, "synthesis_s": 4.0}
        }


def test_hosts_starting_at_once_migrate_the_database_once(postgres_url: str) -> None:
    def start(_: int) -> int:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            return migrate(conn)

    assert sorted(at_once(4, start)) == [0, SCHEMA_VERSION, SCHEMA_VERSION, SCHEMA_VERSION]
    journals = at_once(3, lambda i: PgJournal.connect(postgres_url, host=f"host-{i}"))
    for journal in journals:
        journal.add_job(1, None, {})
        journal.close()
    assert sql(postgres_url, "SELECT version FROM pacer_schema") == [(SCHEMA_VERSION,)]


def test_a_database_of_a_newer_pacer_is_refused(postgres_url: str) -> None:
    PgJournal.connect(postgres_url).close()
    sql(postgres_url, "UPDATE pacer_schema SET version = %s", SCHEMA_VERSION + 1)
    newer = f"has schema version {SCHEMA_VERSION + 1}; this pacer reads"
    with pytest.raises(NewerDatabaseSchemaError, match=newer):
        PgJournal.connect(postgres_url)


def test_a_database_of_version_1_is_migrated_with_its_jobs_and_leases(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn, conn.transaction():
        for statement in MIGRATIONS[1]:
            conn.execute(statement)
        conn.execute("CREATE TABLE pacer_schema (one boolean PRIMARY KEY DEFAULT true"
                     " CHECK (one), version integer NOT NULL)")  # fmt: skip
        conn.execute("INSERT INTO pacer_schema (version) VALUES (1)")
        conn.execute("INSERT INTO jobs (id, state, partitions, partitions_done, params,"
                     " priority, created_at, updated_at) VALUES ('old', 'running', 4, 0, '{}',"
                     " 0, 0, 0)")  # fmt: skip
        conn.execute("INSERT INTO batches (job_id, priority, created_at, seq, first, start,"
                     " stop, claimed_by, lease_until) VALUES ('old', 0, 0, 1, 0, 0, 4, 'gone',"
                     " now() - interval '1 s')")  # fmt: skip
    with PgJournal.connect(postgres_url, host="host-a") as journal:
        (claim,) = journal.claim("host-a", 4)  # a lease of version 1 lapses without grace
        assert (claim.job_id, claim.reclaimed_from, claim.pending.runs()) == ("old", "gone",
                                                                              [(0, 4)])  # fmt: skip
        assert claim.token > 0
    assert sql(postgres_url, "SELECT version FROM pacer_schema") == [(SCHEMA_VERSION,)]
