"""What the server did during a `bench.fleet commits` run, each interval, read from its
statistics views (`sample_progress`): commits, WAL, checkpoints, the queue's dead rows, the
tables' sizes, autovacuum's runs; with ``--statements``, the statements that took the server
most time (`pg_stat_statements`), what the claimers' sessions were doing, and the updates of
the jobs' rows."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable

import psycopg

from bench.cpu_reference import CpuReference

# What the server did in an interval, read from its statistics views: what the jobs' progress
# rows count (every commit is in one), the WAL written and its full-page images, checkpoints,
# the queue's dead rows and the tables' sizes, and autovacuum's and autoanalyze's runs.
SAMPLE_SQL = """
SELECT (SELECT coalesce(sum(done), 0) FROM job_progress)::bigint,
       (SELECT wal_bytes FROM pg_stat_wal)::bigint, (SELECT wal_fpi FROM pg_stat_wal),
       (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter),
       (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'batches'),
       pg_total_relation_size('batches'), pg_total_relation_size('partitions'),
       pg_total_relation_size('jobs'),
       (SELECT sum(autovacuum_count + autoanalyze_count) FROM pg_stat_user_tables)::bigint
"""


# What each statement cost the server (pg_stat_statements, tracking the statements inside
# pacer's functions too: a call's time includes theirs).
STATEMENTS_SQL = """
SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 60), calls, total_exec_time
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


def statement_times(conn: psycopg.Connection[tuple[object, ...]]) -> dict[str, tuple[int, float]]:
    """Calls and total ms of each statement so far, by its text's start."""
    return {str(q): (int(str(c)), float(str(t))) for q, c, t in conn.execute(STATEMENTS_SQL)}


# What each claimer's session is doing now: waiting on an event, running ("CPU"), waiting for
# its client ("client"), or idle inside a transaction.
WAITS_SQL = """
SELECT CASE WHEN state = 'idle' THEN 'client'
            WHEN state <> 'active' THEN state
            ELSE coalesce(wait_event_type || ':' || wait_event, 'CPU') END
FROM pg_stat_activity
WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND usename = current_user
"""

WAIT_SAMPLE_S = 0.05

# The rows every commit of a job writes: its row and the hosts' progress rows. Updates so far,
# those that were HOT (no index touched), each table's size with its indexes, its heap's pages,
# and the scans of it so far: sequential and by index.
JOB_ROWS_SQL = """
SELECT relname, n_tup_upd, n_tup_hot_upd, pg_total_relation_size(relid),
       pg_relation_size(relid) / current_setting('block_size')::int, seq_scan,
       coalesce(idx_scan, 0)
FROM pg_stat_user_tables WHERE relname IN ('jobs', 'job_progress') ORDER BY relname
"""

JobRows = tuple[int, int, int, int, int, int]  # updates, HOT, bytes, pages, seq and index scans


def job_rows(conn: psycopg.Connection[tuple[object, ...]]) -> dict[str, JobRows]:
    """Per table of `JOB_ROWS_SQL`: (updates, HOT updates, bytes, heap pages, sequential scans,
    index scans)."""
    return {str(r[0]): (int(str(r[1])), int(str(r[2])), int(str(r[3])), int(str(r[4])),
                        int(str(r[5])), int(str(r[6])))
            for r in conn.execute(JOB_ROWS_SQL)}  # fmt: skip


def job_rows_line(before: dict[str, JobRows], after: dict[str, JobRows]) -> str:
    """Each table's updates between two `job_rows`, the share of them HOT, its size and heap
    pages now, and its sequential and index scans between the two.

    >>> job_rows_line({"jobs": (10, 10, 8192, 1, 5, 5)}, {"jobs": (110, 60, 16384, 2, 105, 5)})
    'jobs 100 updates (HOT 50 %), 0.02 MB, 2 pages, scans 100 seq 0 index'
    """
    parts = []
    for table, (updates, hot, size, pages, seq, index) in after.items():
        was, was_hot, _, _, was_seq, was_index = before.get(table, (0, 0, 0, 0, 0, 0))
        share = 100 * (hot - was_hot) / max(1, updates - was)
        parts.append(
            f"{table} {updates - was:,} updates (HOT {share:.0f} %), {size / 2**20:.2f} MB, "
            f"{pages} pages, scans {seq - was_seq:,} seq {index - was_index:,} index"
        )
    return "; ".join(parts)


def sample_waits(
    conn: psycopg.Connection[tuple[object, ...]], seconds: float, stop: threading.Event
) -> Counter[str]:
    """The sessions' states sampled every ``WAIT_SAMPLE_S`` for ``seconds`` (or until
    ``stop``): how many samples found each (`WAITS_SQL`)."""
    seen: Counter[str] = Counter()
    end = time.perf_counter() + seconds
    while not stop.wait(max(0.0, min(WAIT_SAMPLE_S, end - time.perf_counter()))):
        if time.perf_counter() >= end:
            break
        seen.update(str(state) for (state,) in conn.execute(WAITS_SQL))
    return seen


def top_waits(seen: Counter[str], count: int) -> str:
    """The ``count`` states most sampled, each as its share of every sample.

    >>> top_waits(Counter({"CPU": 3, "client": 1}), 6)
    'CPU 75 %, client 25 %'
    """
    total = sum(seen.values()) or 1
    return ", ".join(f"{state} {100 * n / total:.0f} %" for state, n in seen.most_common(count))


def top_statements(
    before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]], count: int
) -> str:
    """The ``count`` statements that took the most time between two `statement_times`."""
    spent = []
    for query, (calls, ms) in after.items():
        calls_then, ms_then = before.get(query, (0, 0.0))
        if calls > calls_then:
            spent.append((ms - ms_then, calls - calls_then, query))
    spent.sort(reverse=True)
    return "; ".join(f"{q!r} {n:,} x {t / n:.3f} ms" for t, n, q in spent[:count])


def cpu_line(before: dict[str, float], after: dict[str, float], commits: int) -> str:
    """The server's CPU between two readings by role (s), in cores and in ms a commit, the
    roles that took most first.

    >>> cpu_line({"backends": 10.0, "ended": 1.0}, {"backends": 25.0, "ended": 1.5}, 10_000)
    '1.55 ms a commit: backends 1.50, ended 0.05'
    """
    spent = sorted(((after[r] - before.get(r, 0.0), r) for r in after), reverse=True)
    per = 1000 / max(commits, 1)
    total = sum(t for t, _ in spent) * per
    return f"{total:.2f} ms a commit: " + ", ".join(f"{r} {t * per:.2f}" for t, r in spent if t > 0)


def sample_progress(
    url: str, interval: float, stop: threading.Event, statements: bool = False,
    cpu: Callable[[], dict[str, float]] | None = None, reference: CpuReference | None = None,
) -> None:  # fmt: skip
    """Every ``interval`` s until ``stop``, print to stderr what the server did meanwhile:
    commits/s, WAL MB/s and the share of it in full-page images, checkpoints, the queue's dead
    rows, the sizes of the queue, the results and the jobs tables (MB), and the runs of
    autovacuum and autoanalyze over pacer's tables; with ``statements``, the six statements
    that took the server most time, each with its calls and mean ms, what the claimers'
    sessions were doing (`sample_waits`), and the updates of the jobs' rows (`job_rows_line`);
    with ``cpu`` (the server's CPU seconds so far, by role), the server's CPU a commit
    (`cpu_line`); with ``reference``, how fast the server's CPUs ran a fixed piece of work,
    and their steal time (`CpuReference.line`)."""
    with psycopg.connect(url, autocommit=True) as conn:
        began = time.perf_counter()
        last = conn.execute(SAMPLE_SQL).fetchone()
        times = statement_times(conn) if statements else {}
        rows = job_rows(conn) if statements else {}
        spent = cpu() if cpu is not None else {}
        while last is not None:
            if statements:
                waits = sample_waits(conn, interval, stop)
            if stop.wait(0 if statements else interval):
                break
            now = conn.execute(SAMPLE_SQL).fetchone()
            assert now is not None
            done, wal, fpi, checkpoints = (now[i] - last[i] for i in range(4))
            mb = 1 / 2**20
            print(
                f"[{time.perf_counter() - began:6.0f} s] {done / interval:7,.0f} commits/s  "
                f"WAL {wal * mb / interval:5.1f} MB/s ({100 * fpi * 8192 / max(wal, 1):3.0f} % "
                f"full pages)  checkpoints {checkpoints}  dead leases {now[4]:,}  "
                f"MB: queue {now[5] * mb:.1f} results {now[6] * mb:.0f} jobs {now[7] * mb:.2f}  "
                f"autovacuums {now[8] - last[8]}",
                file=sys.stderr, flush=True,
            )  # fmt: skip
            last = now
            if cpu is not None:
                spent, spent_before = cpu(), spent
                print(f"    server CPU: {cpu_line(spent_before, spent, done)}", file=sys.stderr)
            if reference is not None:
                print(f"    server's CPUs: {reference.line()}", file=sys.stderr)
            if statements:
                times, before = statement_times(conn), times
                print(f"    most time: {top_statements(before, times, 6)}", file=sys.stderr)
                print(f"    sessions: {top_waits(waits, 6)}", file=sys.stderr)
                rows, rows_before = job_rows(conn), rows
                print(f"    job rows: {job_rows_line(rows_before, rows)}", file=sys.stderr)
