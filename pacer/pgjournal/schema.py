"""The PostgreSQL journal's schema: its versions, the statements that bring a database to each,
and `migrate`, which every host runs as it starts.

The version is the one row of ``pacer_schema``. `migrate` runs in one transaction under an
advisory lock, so hosts that start at once migrate one after another: the first brings the
database to `SCHEMA_VERSION`, the others find it there and change nothing. DDL is
transactional in PostgreSQL: a migration that fails leaves the database as it was.

Version 1: jobs, partitions (a row only once a partition has a result), attempts, estimates
(a row per host: the controller is per host), and ``batches``, the fleet's queue: a job's
partitions not yet handed out are a few unclaimed rows of index runs (its lanes), and each
claim leases runs of them to a host (``claimed_by`` until ``lease_until``, on the database's
clock). ``pacer_claim`` claims in one round trip; `pacer.pgjournal.leases` says how.

Version 2: ``workload_estimates``, the engines' estimates by workload key (shared by the fleet:
an engine's workload is the same whichever host paces it).
"""

from __future__ import annotations

import psycopg
from psycopg.rows import TupleRow

from pacer.journal.records import JournalRefusedError

SCHEMA_VERSION = 2

# pg_advisory_xact_lock's key for migrations: any constant no other application takes.
MIGRATION_LOCK = 0x7061636572_5347  # "pacer", "SG"

# A job's unclaimed partitions are split into this many runs at most, of at least
# LANE_PARTITIONS each: claimers lock runs with SKIP LOCKED, and with one run per job a
# concurrent claimer would skip the job entirely.
LANES = 16
LANE_PARTITIONS = 256

_CLAIM_FUNCTION = """
CREATE OR REPLACE FUNCTION pacer_claim(holder text, wanted integer, lease_s double precision)
RETURNS TABLE (claimed_batch bigint, claimed_job text, claimed_start integer,
               claimed_stop integer, claimed_done integer[], reclaimed_from text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    -- The free runs, and the leased ones whose lease ran out, each in the fleet's order (one
    -- partial index each: the leases in flight are never scanned), merged as they are read.
    free CURSOR FOR
        SELECT * FROM batches b WHERE b.claimed_by IS NULL
        ORDER BY b.priority DESC, b.created_at, b.seq, b.given_back DESC, b.first
        FOR UPDATE SKIP LOCKED;
    lapsed CURSOR FOR
        SELECT * FROM batches b WHERE b.claimed_by IS NOT NULL AND b.lease_until < now()
        ORDER BY b.priority DESC, b.created_at, b.seq, b.given_back DESC, b.first
        FOR UPDATE SKIP LOCKED;
    f batches%ROWTYPE;
    l batches%ROWTYPE;
    r batches%ROWTYPE;
    next_free boolean := true;
    next_lapsed boolean := true;
    remaining integer := wanted;
    until timestamptz := now() + make_interval(secs => lease_s);
    cut integer;
    head integer;
    finished integer[];
    pending integer;
BEGIN
    -- A claim lost in a crash only hands its partitions out again: no need to wait for the
    -- WAL to reach the disk.
    PERFORM set_config('synchronous_commit', 'off', true);
    OPEN free;
    OPEN lapsed;
    WHILE remaining > 0 LOOP
        IF next_free THEN
            FETCH free INTO f;  -- all NULL past the last row
            next_free := f.id IS NOT NULL;
        END IF;
        IF next_lapsed THEN
            FETCH lapsed INTO l;
            next_lapsed := l.id IS NOT NULL;
        END IF;
        next_free := false;
        next_lapsed := false;
        EXIT WHEN f.id IS NULL AND l.id IS NULL;
        IF l.id IS NOT NULL AND (f.id IS NULL OR l.priority > f.priority
                OR (l.priority = f.priority
                    AND (l.created_at, l.seq, NOT l.given_back, l.first)
                        < (f.created_at, f.seq, NOT f.given_back, f.first))) THEN
            r := l;
            l.id := NULL;
            next_lapsed := true;
        ELSE
            r := f;
            f.id := NULL;
            next_free := true;
        END IF;
        -- A job that ends deletes its runs, but a lease taken as it ended survives that:
        -- a lapsed lease is of a job still active only if its job says so. (A free run is:
        -- a release deletes the leases of ended jobs rather than free them.)
        IF r.claimed_by IS NOT NULL AND NOT EXISTS (SELECT 1 FROM jobs j
                WHERE j.id = r.job_id AND j.state IN ('queued', 'running')) THEN
            DELETE FROM batches WHERE id = r.id;
            CONTINUE;
        END IF;
        -- The shortest head of the run with as many partitions without a result as wanted
        -- (or all of it): each result found in it makes it one longer.
        cut := r.start;
        finished := '{}';
        pending := 0;
        WHILE pending < remaining AND cut < r.stop LOOP
            head := LEAST(r.stop, cut + remaining - pending);
            finished := finished || ARRAY(SELECT p.idx FROM partitions p
                WHERE p.job_id = r.job_id AND p.idx >= cut AND p.idx < head ORDER BY p.idx);
            cut := head;
            pending := cut - r.start - cardinality(finished);
        END LOOP;
        claimed_batch := r.id;
        IF cut < r.stop THEN
            -- The rest of the run stays free for anyone: of a free run, a HOT update (no
            -- indexed column changes); of a lapsed lease, a run given back.
            UPDATE batches SET start = cut, claimed_by = NULL, lease_until = NULL,
                first = CASE WHEN r.claimed_by IS NULL THEN first ELSE cut END,
                given_back = given_back OR r.claimed_by IS NOT NULL
            WHERE id = r.id;
            IF pending > 0 THEN
                INSERT INTO batches (job_id, priority, created_at, seq, first, start, stop,
                                     claimed_by, lease_until)
                VALUES (r.job_id, r.priority, r.created_at, r.seq, r.start, r.start, cut,
                        holder, until)
                RETURNING id INTO claimed_batch;
            END IF;
        ELSIF pending > 0 THEN
            UPDATE batches SET claimed_by = holder, lease_until = until WHERE id = r.id;
        ELSE
            DELETE FROM batches WHERE id = r.id;  -- every partition has its result
        END IF;
        IF pending > 0 THEN
            remaining := remaining - pending;
            claimed_job := r.job_id;
            claimed_start := r.start;
            claimed_stop := cut;
            claimed_done := finished;
            reclaimed_from := r.claimed_by;
            RETURN NEXT;
        END IF;
    END LOOP;
    CLOSE free;
    CLOSE lapsed;
END $$
"""

# The statements that bring a database from version n - 1 to n, run in one transaction.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE jobs (
    id text PRIMARY KEY, seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE, state text NOT NULL,
    partitions integer NOT NULL, partitions_done integer NOT NULL, workload text,
    params text NOT NULL, priority bigint NOT NULL, created_at double precision NOT NULL,
    updated_at double precision NOT NULL, error text, result_digest text,
    idempotency_key text UNIQUE, request_digest text)""",
        "CREATE INDEX jobs_by_state ON jobs (state, created_at, seq)",
        "CREATE INDEX jobs_by_age ON jobs (created_at, seq)",
        "CREATE INDEX jobs_by_update ON jobs (state, updated_at)",
        """CREATE TABLE partitions (
    job_id text NOT NULL, idx integer NOT NULL, state text NOT NULL,
    synthesis_s double precision, gpu_s double precision, phases text NOT NULL, digest text,
    error text, gpu integer, completed_at double precision NOT NULL,
    PRIMARY KEY (job_id, idx))""",
        "CREATE INDEX partitions_failed ON partitions (job_id, idx) WHERE state = 'failed'",
        """CREATE TABLE attempts (
    job_id text NOT NULL, idx integer NOT NULL, attempt integer NOT NULL, reason text NOT NULL,
    gpu integer, at double precision NOT NULL, PRIMARY KEY (job_id, idx, attempt))""",
        "CREATE TABLE estimates (host text PRIMARY KEY, estimates text NOT NULL)",
        # Each row a run [start, stop) of a job's partitions, with its place in the fleet's
        # order: its job's (priority, then age), then runs given back (a release, the rest
        # of a lapsed lease) before the job's lanes, each by where it began (``first``); so
        # claims read the free runs in order from one index. Room is left in each page: a
        # claim's update of a lane's start is then a HOT update, which no index sees.
        """CREATE TABLE batches (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, job_id text NOT NULL,
    priority bigint NOT NULL, created_at double precision NOT NULL, seq bigint NOT NULL,
    given_back boolean NOT NULL DEFAULT false, first integer NOT NULL, start integer NOT NULL,
    stop integer NOT NULL, claimed_by text, lease_until timestamptz,
    CHECK (0 <= first AND first <= start AND start < stop),
    CHECK ((claimed_by IS NULL) = (lease_until IS NULL))) WITH (fillfactor = 50)""",
        "CREATE INDEX batches_free ON batches"
        " (priority DESC, created_at, seq, given_back DESC, first)"
        " WHERE claimed_by IS NULL",
        "CREATE INDEX batches_by_lease ON batches (lease_until) WHERE claimed_by IS NOT NULL",
        "CREATE INDEX batches_by_holder ON batches (claimed_by) WHERE claimed_by IS NOT NULL",
        "CREATE INDEX batches_by_job ON batches (job_id)",
        _CLAIM_FUNCTION,
    ),
    2: (
        "CREATE TABLE workload_estimates (workload_key text PRIMARY KEY, estimates text NOT NULL)",
    ),
}


class NewerDatabaseSchemaError(JournalRefusedError):
    """The database was migrated by a newer pacer, to a schema this version cannot read."""

    def __init__(self, found: int) -> None:
        super().__init__(
            f"the PostgreSQL journal has schema version {found}; this pacer reads up to "
            f"version {SCHEMA_VERSION}: upgrade pacer on this host"
        )
        self.found = found


def schema_version(conn: psycopg.Connection[TupleRow]) -> int:
    """The database's schema version; 0 when pacer has never migrated it."""
    if conn.execute("SELECT to_regclass('pacer_schema')").fetchone() == (None,):
        return 0
    row = conn.execute("SELECT version FROM pacer_schema").fetchone()
    return 0 if row is None else int(row[0])


def migrate(conn: psycopg.Connection[TupleRow]) -> int:
    """Bring the database to `SCHEMA_VERSION` under the migration lock, in one transaction; the
    version found. `NewerDatabaseSchemaError` if a newer pacer migrated it."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS pacer_schema (one boolean PRIMARY KEY DEFAULT true"
            " CHECK (one), version integer NOT NULL)"
        )
        found = schema_version(conn)
        if found > SCHEMA_VERSION:
            raise NewerDatabaseSchemaError(found)
        for version in range(found + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
        conn.execute(
            "INSERT INTO pacer_schema (version) VALUES (%s)"
            " ON CONFLICT (one) DO UPDATE SET version = excluded.version",
            (SCHEMA_VERSION,),
        )
    return found
