"""The fleet's server-side routines: `CLAIM_FUNCTION` (``pacer_claim``) hands out leases, each
with a fencing token, and `COMMIT_PROCEDURE` (``pacer_commit``) stores results under them; each
is one round trip, so no lock is held while a host is between two statements.

A lease's token (from the ``batch_tokens`` sequence) is new at every claim of its run: a host
that lost a lease (it lapsed and another host took it) holds a token no row has any more, and
``pacer_commit`` stores none of its results. ``pacer_commit`` locks the leases it commits under
``FOR KEY SHARE``, which a claim's ``FOR UPDATE SKIP LOCKED`` passes: a lease is never taken
while a commit under it runs, and a commit that waited for a claim reads the lease as it left it.
"""

# When the fleet last came back to the server after none of its hosts could reach it: the
# last call of a claim or a renewal is kept in ``fleet_clock``. ``pacer_back`` records this
# call (at most once every quarter of a lease, and never waiting: another call recording is
# as good) and answers since when the hosts have had the server without a gap: the later of
# the server's start and the end of the last gap of more than half a lease with no call. A
# gap is an outage for every host (a restart, a failover to a standby, the network), since
# live hosts renew every third of a lease; a gap seen now answers now. A lease renewed
# before that time lapses no sooner than a lease's time after it: its holder had no way to
# renew while the fleet could not reach the server.
BACK_FUNCTION = """
CREATE OR REPLACE FUNCTION pacer_back(lease_s double precision) RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    seen timestamptz;
    back timestamptz;
BEGIN
    SELECT c.seen_at, c.back_at INTO seen, back FROM fleet_clock c;
    IF seen IS NULL OR now() - seen > make_interval(secs => lease_s / 2) THEN
        back := now();
    END IF;
    IF seen IS NULL THEN  -- the row was deleted: the clock starts again, from now
        INSERT INTO fleet_clock (back_at) VALUES (back) ON CONFLICT DO NOTHING;
    ELSIF now() - seen > make_interval(secs => lease_s / 4) THEN
        UPDATE fleet_clock c SET seen_at = now(), back_at = back
        WHERE c.one IN (SELECT one FROM fleet_clock FOR UPDATE SKIP LOCKED);
    END IF;
    RETURN greatest(back, pg_postmaster_start_time());
END $$
"""

CLOCK_SCHEMA = (
    """CREATE TABLE fleet_clock (
        one boolean PRIMARY KEY DEFAULT true CHECK (one),
        seen_at timestamptz NOT NULL DEFAULT now(),
        back_at timestamptz NOT NULL DEFAULT '-infinity'
    )""",
    "INSERT INTO fleet_clock DEFAULT VALUES",
    BACK_FUNCTION,
)

CLAIM_FUNCTION = """
CREATE OR REPLACE FUNCTION pacer_claim(holder text, wanted integer, lease_s double precision)
RETURNS TABLE (claimed_batch bigint, claimed_job text, claimed_start integer,
               claimed_stop integer, claimed_done integer[], reclaimed_from text,
               claimed_token bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    -- The free runs, and the leased ones whose lease ran out, each in the fleet's order (an
    -- index each: the leases in flight are never scanned), merged as they are read.
    free CURSOR FOR
        SELECT * FROM batches b WHERE b.claimed_by IS NULL
        ORDER BY b.priority DESC, b.created_at, b.seq, b.given_back DESC, b.first
        FOR UPDATE SKIP LOCKED;
    -- A lease last renewed before the fleet came back to the server (a restart, a failover,
    -- an outage: pacer_back) lapses no sooner than a lease's time after that: its holder
    -- could not renew meanwhile, and gets that long to reach the server again. (A lease of
    -- version 1 has no renewal time: no grace.)
    back timestamptz := pacer_back(lease_s);
    -- A row with a lease_until is a lease (the table's CHECK); the condition names no
    -- claimed_by, so that only the index on lease_until can serve it, and the scan reads the
    -- leases that ran out, not every lease and dead lease row through the holders' index.
    lapsed CURSOR FOR
        SELECT * FROM batches b WHERE b.lease_until < now()
            AND (coalesce(b.renewed_at, 'infinity') >= back
                 OR now() >= back + make_interval(secs => lease_s))
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
                                     claimed_by, lease_until, renewed_at, token)
                VALUES (r.job_id, r.priority, r.created_at, r.seq, r.start, r.start, cut,
                        holder, until, now(), nextval('batch_tokens'))
                RETURNING id, token INTO claimed_batch, claimed_token;
            END IF;
        ELSIF pending > 0 THEN
            UPDATE batches SET claimed_by = holder, lease_until = until, renewed_at = now(),
                token = nextval('batch_tokens')
            WHERE id = r.id RETURNING token INTO claimed_token;
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

# Results of proved partitions, as parallel arrays, stored by one CALL in two transactions.
# The first stores those of a lease (``batch``, ``token``) only while ``holder`` still holds it
# with that token, those without a lease (NULL batch) as they come, skipping a result already
# stored or of a job no longer queued or running; it counts them in ``holder``'s own progress
# row of each job (``job_progress``), drops finished leases, and commits, waiting for the WAL
# flush, without touching a job's row: commits of one job from many hosts flush together. The
# second sets each job's ``partitions_done`` to the sum of its progress rows, under the job's
# row lock (in id order), and completes the job that has them all; it does not wait for the
# flush unless it completed one (progress it loses in a crash is summed again by the next
# commit, or this one retried). Where another commit holds a running job's row, it leaves the
# count to that one, or to the next: so commits of one job do not queue on its row. It waits
# for the row only to start a queued job, or to complete one whose progress rows count every
# partition (the commit that stores the last result always does: its own rows are in the sum).
# ``completed``: the jobs completed; ``refused``: results refused
# under leases no longer held. Raises PCR01 (an unknown job) or PCR02 (an index past a job's
# partitions) before writing anything.
COMMIT_PROCEDURE = """
CREATE OR REPLACE PROCEDURE pacer_commit(holder text, at double precision, job_ids text[],
                              batch_ids bigint[], tokens bigint[], idxs integer[],
                              synthesis double precision[], gpu_seconds double precision[],
                              phase_texts text[], digests text[], gpus integer[],
                              INOUT completed text[] DEFAULT NULL,
                              INOUT refused integer DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    t double precision := coalesce(at, extract(epoch FROM now()));
    missing text;
    bad record;
    held_ids bigint[];
    held_tokens bigint[];
    new_jobs text[];
    new_idxs integer[];
    j record;
    k record;
    total integer;
BEGIN
    completed := '{}';
    SELECT r.job_id INTO missing FROM unnest(job_ids) AS r (job_id)
        WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE id = r.job_id) LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PCR01', MESSAGE = missing;
    END IF;
    SELECT r.job_id, r.idx, jobs.partitions INTO bad
        FROM unnest(job_ids, idxs) AS r (job_id, idx) JOIN jobs ON jobs.id = r.job_id
        WHERE r.idx >= jobs.partitions LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PCR02', MESSAGE = format(
            'index must be from 0 to %s for job %s, got %s', bad.partitions - 1, bad.job_id,
            bad.idx);
    END IF;
    SELECT coalesce(array_agg(h.id), '{}'), coalesce(array_agg(h.token), '{}')
        INTO held_ids, held_tokens
        FROM (SELECT id, token FROM batches WHERE id = ANY(batch_ids) AND claimed_by = holder
              ORDER BY id FOR KEY SHARE) AS h;
    WITH items AS (
        SELECT * FROM unnest(job_ids, batch_ids, tokens, idxs, synthesis, gpu_seconds,
                             phase_texts, digests, gpus)
            AS r (job_id, batch, token, idx, synthesis_s, gpu_s, phases, digest, gpu)
    ), fenced AS (
        -- Held or not whatever the job's state: a result under a lease taken from this host
        -- is refused even when the job has since ended. Only an active job's are stored.
        SELECT i.*, i.batch IS NULL OR (i.batch, i.token) IN (
            SELECT * FROM unnest(held_ids, held_tokens)) AS held,
            jobs.state IN ('queued', 'running') AS active
        FROM items i JOIN jobs ON jobs.id = i.job_id
    ), stored AS (
        INSERT INTO partitions (job_id, idx, state, synthesis_s, gpu_s, phases, digest, gpu,
                                completed_at)
        SELECT job_id, idx, 'completed', synthesis_s, gpu_s, phases, digest, gpu, t
        FROM fenced WHERE held AND active
        ORDER BY job_id, idx  -- commits that meet on a result wait in one order, never a cycle
        ON CONFLICT (job_id, idx) DO NOTHING RETURNING job_id, idx
    )
    SELECT coalesce(array_agg(s.job_id), '{}'), coalesce(array_agg(s.idx), '{}'),
           (SELECT count(*) FROM fenced WHERE NOT held)
        INTO new_jobs, new_idxs, refused FROM stored s;
    INSERT INTO job_progress (job_id, host, done)
        SELECT job_id, holder, count(*) FROM unnest(new_jobs) AS job_id GROUP BY job_id
        ORDER BY job_id
        ON CONFLICT (job_id, host) DO UPDATE SET done = job_progress.done + excluded.done;
    -- The leases whose partitions all have results leave the queue (locked in id order).
    -- Results that all came under leases can finish only those leases: they are found by
    -- key, not among every lease of the job.
    IF array_position(batch_ids, NULL) IS NULL THEN
        DELETE FROM batches WHERE id IN (
            SELECT b.id FROM batches b WHERE b.id = ANY(held_ids)
                AND b.stop - b.start = (SELECT count(*) FROM partitions p
                    WHERE p.job_id = b.job_id AND p.idx >= b.start AND p.idx < b.stop)
                ORDER BY b.id FOR UPDATE OF b);
    ELSE DELETE FROM batches WHERE id IN (
        SELECT b.id FROM batches b JOIN (
                SELECT job_id, min(idx) AS lo, max(idx) AS hi FROM unnest(new_jobs, new_idxs)
                    AS n (job_id, idx) GROUP BY job_id) AS n
            ON b.job_id = n.job_id AND b.claimed_by IS NOT NULL AND b.start <= n.hi
                AND b.stop > n.lo
            WHERE b.stop - b.start = (SELECT count(*) FROM partitions p
                WHERE p.job_id = b.job_id AND p.idx >= b.start AND p.idx < b.stop)
            ORDER BY b.id FOR UPDATE OF b);
    END IF;
    COMMIT;
    -- Every job of the batch, not only those with new results: a retry after this part
    -- failed (or the server crashed) counts what the first attempt stored.
    -- Rows are taken in id order, and a row held elsewhere is waited for only where the job
    -- starts or completes, so no two commits wait on each other in a cycle.
    FOR j IN SELECT jobs.id, jobs.state, jobs.partitions,
                    (SELECT coalesce(sum(done), 0) FROM job_progress
                     WHERE job_id = jobs.id) AS seen FROM jobs
            WHERE id IN (SELECT DISTINCT unnest(job_ids)) AND state IN ('queued', 'running')
            ORDER BY id LOOP
        IF j.state = 'queued' OR j.seen >= j.partitions THEN
            SELECT jobs.id, jobs.state, jobs.partitions, jobs.partitions_done INTO k FROM jobs
                WHERE id = j.id AND state IN ('queued', 'running') FOR NO KEY UPDATE;
        ELSE
            SELECT jobs.id, jobs.state, jobs.partitions, jobs.partitions_done INTO k FROM jobs
                WHERE id = j.id AND state IN ('queued', 'running') FOR NO KEY UPDATE SKIP LOCKED;
        END IF;
        CONTINUE WHEN NOT FOUND;  -- ended meanwhile, or another commit is counting it
        SELECT coalesce(sum(done), 0) INTO total FROM job_progress WHERE job_id = k.id;
        IF total = k.partitions_done THEN
            CONTINUE;
        ELSIF total < k.partitions AND k.state = 'running' THEN
            UPDATE jobs SET partitions_done = total WHERE id = k.id;
        ELSIF total < k.partitions THEN
            UPDATE jobs SET partitions_done = total, state = 'running', updated_at = t
            WHERE id = k.id;
        ELSE
            PERFORM pacer_complete(k.id, total, t);
            completed := completed || k.id;
        END IF;
    END LOOP;
    IF cardinality(completed) = 0 THEN
        SET LOCAL synchronous_commit = off;
    END IF;
END $$
"""

# A job that has every result completes: its runs leave the queue, and it gets its count,
# ``t`` (its time) and the result digest of `pacer.journal.result_digest`, computed where the
# digests are (its rows, or its pack: `pacer.pgjournal.packs`). The caller holds the job's row
# lock.
COMPLETE_FUNCTION = """
CREATE FUNCTION pacer_complete(job text, total integer, t double precision) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM batches WHERE job_id = job;
    UPDATE jobs SET partitions_done = total, state = 'completed', updated_at = t,
        result_digest = (SELECT encode(sha256(convert_to(
            string_agg(p.digest || chr(10), '' ORDER BY p.idx), 'UTF8')), 'hex')
            FROM partition_rows p WHERE p.job_id = job)
    WHERE id = job;
$$
"""

# The sweep every host's upkeep runs: a job still queued or running whose progress rows count
# all its partitions is completed, as the second part of ``pacer_commit`` would have done had
# it run (it is lost when the server crashes and its host dies before a retry). A job whose
# count is behind its progress rows gets it. Only active jobs are read (``jobs_by_state``),
# each with its progress rows (one per host, by key). A job's row is taken with SKIP LOCKED:
# another host's sweep or a commit holding it is finishing it already; so hosts sweeping at
# once never wait on each other, and a job is completed once. ``at``: the jobs' time (NULL:
# the database's). Returns the ids of the jobs it completed.
SETTLE_FUNCTION = """
CREATE FUNCTION pacer_settle(at double precision) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    t double precision := coalesce(at, extract(epoch FROM now()));
    j record;
BEGIN
    FOR j IN SELECT jobs.id, jobs.state, jobs.partitions, p.total FROM jobs
            CROSS JOIN LATERAL (SELECT coalesce(sum(done), 0)::integer AS total
                                FROM job_progress WHERE job_id = jobs.id) AS p
            WHERE jobs.state IN ('queued', 'running') AND p.total <> jobs.partitions_done
            ORDER BY jobs.id FOR NO KEY UPDATE OF jobs SKIP LOCKED LOOP
        IF j.total < j.partitions THEN
            UPDATE jobs SET partitions_done = j.total, state = 'running',
                updated_at = CASE WHEN j.state = 'running' THEN updated_at ELSE t END
            WHERE id = j.id;
        ELSE
            PERFORM pacer_complete(j.id, j.total, t);
            RETURN NEXT j.id;
        END IF;
    END LOOP;
END $$
"""
