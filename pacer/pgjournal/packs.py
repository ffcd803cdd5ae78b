"""A completed job's results packed into one row: `pack_jobs` runs ``pacer_pack``, which folds
the job's partition rows into one row of ``partition_packs`` (a column of arrays, in index
order) and deletes them; readers see both forms through the view ``partition_rows``, with the
same columns and values, so what the API answers for a job does not change.

A partition row costs its tuple header, its job id, and an index entry; a pack holds the values
only, compressed by TOAST. Only completed jobs are packed: no result is written for a job once
it has ended (a commit skips it), so a pack is never written to.
"""

from __future__ import annotations

import logging

from psycopg_pool import ConnectionPool

from pacer.pgjournal.database import connection

log = logging.getLogger("pacer.journal")

PACK_JOBS = 50  # jobs packed by one upkeep round of one host, at most

# Version 4's statements: the packs, what finds the jobs to pack, the view and the function.
PACK_SCHEMA = (
    "ALTER TABLE jobs ADD COLUMN packed boolean NOT NULL DEFAULT false",
    "CREATE INDEX jobs_to_pack ON jobs (updated_at) WHERE state = 'completed' AND NOT packed",
    """CREATE TABLE partition_packs (
    job_id text PRIMARY KEY, synthesis_s double precision[] NOT NULL,
    gpu_s double precision[] NOT NULL, phases text[] NOT NULL, digests text[] NOT NULL,
    gpus integer[] NOT NULL, completed_at double precision[] NOT NULL)""",
    """CREATE VIEW partition_rows AS
    SELECT job_id, idx, state, synthesis_s, gpu_s, phases, digest, error, gpu, completed_at
    FROM partitions
    UNION ALL
    SELECT k.job_id, (u.n - 1)::integer, 'completed', u.synthesis_s, u.gpu_s, u.phases,
           u.digest, NULL::text, u.gpu, u.completed_at
    FROM partition_packs k CROSS JOIN LATERAL unnest(k.synthesis_s, k.gpu_s, k.phases,
        k.digests, k.gpus, k.completed_at) WITH ORDINALITY
        AS u (synthesis_s, gpu_s, phases, digest, gpu, completed_at, n)""",
    # Up to ``wanted`` completed jobs not yet packed, oldest first, each under its row lock
    # (SKIP LOCKED: hosts packing at once take different jobs). A job whose rows are not one
    # completed row per partition, from 0, is marked and left as it is. Returns how many
    # jobs it packed.
    """CREATE FUNCTION pacer_pack(wanted integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    j record;
    packed_jobs integer := 0;
BEGIN
    FOR j IN SELECT id, partitions FROM jobs WHERE state = 'completed' AND NOT packed
            ORDER BY updated_at LIMIT wanted FOR NO KEY UPDATE SKIP LOCKED LOOP
        INSERT INTO partition_packs
            SELECT j.id, array_agg(synthesis_s ORDER BY idx), array_agg(gpu_s ORDER BY idx),
                   array_agg(phases ORDER BY idx), array_agg(digest ORDER BY idx),
                   array_agg(gpu ORDER BY idx), array_agg(completed_at ORDER BY idx)
            FROM partitions WHERE job_id = j.id
            HAVING count(*) = j.partitions AND max(idx) = j.partitions - 1
                AND bool_and(state = 'completed' AND error IS NULL)
            ON CONFLICT (job_id) DO NOTHING;
        IF FOUND THEN
            DELETE FROM partitions WHERE job_id = j.id;
            packed_jobs := packed_jobs + 1;
        END IF;
        UPDATE jobs SET packed = true WHERE id = j.id;
    END LOOP;
    RETURN packed_jobs;
END $$""",
)


def pack_jobs(pool: ConnectionPool, wanted: int = PACK_JOBS) -> int:
    """Pack up to ``wanted`` completed jobs' partition rows (``pacer_pack``, one round trip);
    how many jobs were packed. Idempotent, and safe on many hosts at once."""
    with connection(pool) as db:
        row = db.execute("SELECT pacer_pack(?)", (wanted,)).fetchone()
    packed = 0 if row is None else int(row[0])
    if packed:
        log.info("packed the partition rows of %d completed jobs", packed)
    return packed
