"""Fleet benchmark of claims *and* commits, as hosts use the database: each claimer is a process
with one connection that claims ``--batch`` partitions of one job, then commits their results
under the lease it got (`PgJournal.complete_partitions`, one round trip), back to back.

    .venv/bin/python -m bench.fleet commits [--claimers 10,25,50] [--seconds 20]
                                            [--batch 1] [--interval 2] [--db-cpus 0,1]
                                            [--markdown]

A fresh database per row on a PostgreSQL of its own (Debian's package, durable: fsync on, over
loopback TCP). Reports commits a second (all claimers), the latency of one claim and of one
commit (p50, p99), the throughput of each ``--interval`` and its decay (the last interval
against the first, and along a least-squares line through them all), and the database's CPU:
the server's processes' user + system time over the timed window, read from /proc, in cores.
Target: >= 1,000 commits/s at 25 claimers with a commit p99 <= 100 ms, decaying < 20 % over 10
minutes by either measure (2 database cores, fsync on). While a row runs, each ``--interval``
prints to stderr what the server did meanwhile (`sample_progress`).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path

import psycopg
from psycopg_pool import ConnectionPool

from pacer.journal import MAX_PARTITIONS, LeaseToken, PartitionResult
from pacer.pgjournal import PgJournal
from pacer.pgjournal import journal as pg_journal_module
from pacer.service.fleet_host import RENEWALS_PER_LEASE
from tests.postgres_server import PostgresServer

JOB_PARTITIONS = MAX_PARTITIONS  # one job, of the most partitions a job may have
WARMUP_S = 1.0
TARGET_COMMITS_S = 1_000
TARGET_P99_MS = 100.0
TARGET_DECAY_PCT = 20.0  # the last interval's rate against the first's
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class CommitterRun:
    """One claimer's timed window: claim and commit latencies (s), when each commit ended (s
    from the window's start), and claims that came back empty."""

    claims: list[float]
    commits: list[float]
    ends: list[float]
    empty: int


def no_vacuum(pool: ConnectionPool, dead_rows: int | None = None) -> bool:
    """In place of `tidy_queue` for the arm that leaves the queue table to autovacuum."""
    return False


def committer(
    url: str, host: str, batch: int, seconds: float, barrier: Barrier,
    runs: multiprocessing.Queue[CommitterRun], vacuum: bool = True,
) -> None:  # fmt: skip
    """Claim ``batch`` partitions and commit them, back to back, for ``seconds`` after a
    warm-up, once every claimer is ready, renewing the leases every third of a lease as a
    host does (and with it vacuuming the queue, unless ``vacuum`` is false); put what it did
    on ``runs``, and keep the connection (its server process, whose CPU is counted) until
    every claimer is done."""
    if not vacuum:
        setattr(pg_journal_module, "tidy_queue", no_vacuum)  # noqa: B010
    with PgJournal.connect(url, host=host, pool_size=1) as journal:
        barrier.wait()
        start = time.perf_counter() + WARMUP_S
        end = start + seconds
        renew_s = journal.lease_s / RENEWALS_PER_LEASE
        renew_at = time.perf_counter() + renew_s * (0.5 + random.random())
        run = CommitterRun([], [], [], 0)
        while (began := time.perf_counter()) < end:
            if began >= renew_at:  # as a host renews its leases (and vacuums the queue)
                journal.renew(host)
                renew_at = began + renew_s
                continue
            claims = journal.claim(host, batch)
            claimed = time.perf_counter()
            results = [
                PartitionResult(c.job_id, i, f"d{i}", 1.0, 0.1, lease=LeaseToken(c.batch, c.token))
                for c in claims
                for i in c.pending
            ]
            if results:
                journal.complete_partitions(results)
            done = time.perf_counter()
            if began < start:
                continue
            run.claims.append(claimed - began)
            if results:
                run.commits.append(done - claimed)
                run.ends.append(done - start)
            else:
                run.empty += 1
        runs.put(run)
        barrier.wait()


def server_cpu_s(server: PostgresServer) -> float:
    """User + system CPU seconds of the server's processes (the postmaster and its children:
    backends, WAL writer, checkpointer), from /proc."""
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        pid, ppid = int(entry.name), int(fields[1])
        if pid == postmaster or ppid == postmaster:
            total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return total


def cpu_list(text: str) -> set[int]:
    """The CPUs of a ``taskset`` list such as ``0,1`` or ``0-3,8``. ValueError when malformed."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def line_decay(rates: list[int]) -> float | None:
    """How much a least-squares line through the intervals' rates falls from the first
    interval to the last, in % of where it starts (None with fewer than 3 intervals, or a
    line that starts at or below 0): one slow or fast interval at either end moves it less
    than it moves the first against the last.

    >>> line_decay([1000, 900, 800])  # straight down: as first against last
    20.0
    >>> round(line_decay([1000, 1000, 1000, 1000, 600]))  # one slow end: 40 % first to last
    30
    >>> line_decay([1000, 800]) is None
    True
    """
    if len(rates) < 3:
        return None
    slope, start = statistics.linear_regression(range(len(rates)), rates)
    if start <= 0:
        return None
    return -100.0 * slope * (len(rates) - 1) / start


def quantile_ms(values: list[float], q: int) -> str:
    if len(values) < 2:
        return "-"
    return f"{statistics.quantiles(values, n=100)[q - 1] * 1000:.1f}"


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
# those that were HOT (no index touched), and each table's size with its indexes.
JOB_ROWS_SQL = """
SELECT relname, n_tup_upd, n_tup_hot_upd, pg_total_relation_size(relid)
FROM pg_stat_user_tables WHERE relname IN ('jobs', 'job_progress') ORDER BY relname
"""


def job_rows(conn: psycopg.Connection[tuple[object, ...]]) -> dict[str, tuple[int, int, int]]:
    """Per table of `JOB_ROWS_SQL`: (updates, HOT updates, bytes)."""
    return {str(r[0]): (int(str(r[1])), int(str(r[2])), int(str(r[3])))
            for r in conn.execute(JOB_ROWS_SQL)}  # fmt: skip


def job_rows_line(
    before: dict[str, tuple[int, int, int]], after: dict[str, tuple[int, int, int]]
) -> str:
    """Each table's updates between two `job_rows`, the share of them HOT, and its size now.

    >>> job_rows_line({"jobs": (10, 10, 8192)}, {"jobs": (110, 60, 16384)})
    'jobs 100 updates (HOT 50 %), 0.02 MB'
    """
    parts = []
    for table, (updates, hot, size) in after.items():
        was, was_hot, _ = before.get(table, (0, 0, 0))
        share = 100 * (hot - was_hot) / max(1, updates - was)
        parts.append(
            f"{table} {updates - was:,} updates (HOT {share:.0f} %), {size / 2**20:.2f} MB"
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


def sample_progress(
    url: str, interval: float, stop: threading.Event, statements: bool = False
) -> None:
    """Every ``interval`` s until ``stop``, print to stderr what the server did meanwhile:
    commits/s, WAL MB/s and the share of it in full-page images, checkpoints, the queue's dead
    rows, the sizes of the queue, the results and the jobs tables (MB), and the runs of
    autovacuum and autoanalyze over pacer's tables; with ``statements``, the six statements
    that took the server most time, each with its calls and mean ms, what the claimers'
    sessions were doing (`sample_waits`), and the updates of the jobs' rows (`job_rows_line`)."""
    with psycopg.connect(url, autocommit=True) as conn:
        began = time.perf_counter()
        last = conn.execute(SAMPLE_SQL).fetchone()
        times = statement_times(conn) if statements else {}
        rows = job_rows(conn) if statements else {}
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
            if statements:
                times, before = statement_times(conn), times
                print(f"    most time: {top_statements(before, times, 6)}", file=sys.stderr)
                print(f"    sessions: {top_waits(waits, 6)}", file=sys.stderr)
                rows, rows_before = job_rows(conn), rows
                print(f"    job rows: {job_rows_line(rows_before, rows)}", file=sys.stderr)


def measure(
    server: PostgresServer, claimers: int, batch: int, seconds: float, interval: float,
    vacuum: bool = True, statements: bool = False,
) -> list[object]:  # fmt: skip
    """One row of the table: ``claimers`` processes claiming and committing on one job."""
    url = server.create_database()
    if statements:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
    with PgJournal.connect(url) as journal:
        journal.add_job(JOB_PARTITIONS, "noop", {})
    spawn = multiprocessing.get_context("spawn")
    barrier = spawn.Barrier(claimers + 1)
    queue: multiprocessing.Queue[CommitterRun] = spawn.Queue()
    processes = [
        spawn.Process(target=committer, args=(url, f"host-{i}", batch, seconds, barrier,
                                                   queue, vacuum))
        for i in range(claimers)
    ]  # fmt: skip
    for process in processes:
        process.start()
    barrier.wait()
    time.sleep(WARMUP_S)
    cpu_before, wall_before = server_cpu_s(server), time.perf_counter()
    stop = threading.Event()
    sampler = threading.Thread(
        target=sample_progress, args=(url, interval, stop, statements), daemon=True
    )
    sampler.start()
    runs = [queue.get() for _ in processes]
    cpu = (server_cpu_s(server) - cpu_before) / (time.perf_counter() - wall_before)
    stop.set()
    sampler.join()
    barrier.wait()  # the claimers may close their connections now
    for process in processes:
        process.join()
    claims = sorted(x for run in runs for x in run.claims)
    commits = sorted(x for run in runs for x in run.commits)
    slots = max(1, int(seconds // interval))
    per_interval = [0] * slots
    for run in runs:
        for end in run.ends:
            per_interval[min(slots - 1, int(end // interval))] += 1
    rates = [round(count / interval) for count in per_interval]
    decay = 100.0 * (rates[0] - rates[-1]) / rates[0] if rates[0] else 0.0
    trend = line_decay(rates)
    return [
        claimers, batch, round(len(commits) / seconds), quantile_ms(claims, 50),
        quantile_ms(claims, 99), quantile_ms(commits, 50), quantile_ms(commits, 99),
        " ".join(map(str, rates)), f"{decay:.0f}", "-" if trend is None else f"{trend:.0f}",
        f"{cpu:.2f}",
        sum(run.empty for run in runs),
    ]  # fmt: skip


HEADERS = ["claimers", "batch", "commits/s", "claim p50 ms", "claim p99 ms", "commit p50 ms",
           "commit p99 ms", "commits/s per interval", "decay %", "decay % (line)",
           "db CPU (cores)",
           "empty claims"]  # fmt: skip


def rows(
    claimers: list[int], batch: int, seconds: float, interval: float, db_cpus: str | None = None,
    vacuum: bool = True, statements: bool = False,
) -> list[list[object]]:  # fmt: skip
    """The table's rows, each on a fresh database of one durable server. ``db_cpus`` (a
    ``taskset`` list): the server runs on those CPUs and the claimers on the others.
    ``statements``: the server loads pg_stat_statements, and each interval's progress names
    the statements that took it most time."""
    if db_cpus is not None:
        os.sched_setaffinity(0, os.sched_getaffinity(0) - cpu_list(db_cpus))
    settings = {}
    if statements:
        settings = {"shared_preload_libraries": "pg_stat_statements",
                    "pg_stat_statements.track": "all"}  # fmt: skip
    server = PostgresServer(durable=True, tcp=True, cpus=db_cpus, settings=settings)
    server.start()
    try:
        return [measure(server, c, batch, seconds, interval, vacuum, statements)
                for c in claimers]  # fmt: skip
    finally:
        server.stop()
