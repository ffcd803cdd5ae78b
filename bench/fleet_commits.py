"""Fleet benchmark of claims *and* commits, as hosts use the database: each claimer is a process
with one connection that claims ``--batch`` partitions of one job, then commits their results
under the lease it got (`PgJournal.complete_partitions`, one round trip), back to back.

    .venv/bin/python -m bench.fleet commits [--claimers 10,25,50] [--seconds 20]
                                            [--batch 1] [--interval 2] [--db-cpus 0,1]
                                            [--statements] [--prefill N] [--markdown]

A fresh database per row on a PostgreSQL of its own (Debian's package, durable: fsync on, over
loopback TCP). Reports commits a second (all claimers), the latency of one claim and of one
commit (p50, p99), the throughput of each ``--interval`` and its decay (the last interval
against the first, and along a least-squares line through them all), and the database's CPU:
the server's processes' user + system time over the timed window (those that ended within it,
such as autovacuum workers, included), read from /proc, in cores.
Target: >= 1,000 commits/s at 25 claimers with a commit p99 <= 100 ms, decaying < 20 % over 10
minutes by either measure (2 database cores, fsync on). While a row runs, each ``--interval``
prints to stderr what the server did meanwhile (`sample_progress`).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import random
import statistics
import threading
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path

import psycopg
from psycopg_pool import ConnectionPool

from bench.cpu_reference import CpuReference
from bench.fleet_progress import sample_progress
from pacer.journal import MAX_PARTITIONS, Claim, LeaseToken, PartitionResult
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
    reconnect_s: float | None = None,
) -> None:  # fmt: skip
    """Claim ``batch`` partitions and commit them, back to back, for ``seconds`` after a
    warm-up, once every claimer is ready, renewing the leases every third of a lease as a
    host does (and with it vacuuming the queue, unless ``vacuum`` is false); put what it did
    on ``runs``, and keep the connection (its server process, whose CPU is counted) until
    every claimer is done. ``reconnect_s``: close the connection and open a new one (a new
    server process) every that many seconds, the first at a random point of the first."""
    if not vacuum:
        setattr(pg_journal_module, "tidy_queue", no_vacuum)  # noqa: B010
    journal = PgJournal.connect(url, host=host, pool_size=1)
    try:
        barrier.wait()
        start = time.perf_counter() + WARMUP_S
        end = start + seconds
        renew_s = journal.lease_s / RENEWALS_PER_LEASE
        renew_at = time.perf_counter() + renew_s * (0.5 + random.random())
        reconnect_at = math.inf if reconnect_s is None else start + reconnect_s * random.random()
        run = CommitterRun([], [], [], 0)
        claims: list[Claim] = []  # the leases this claimer holds, renewed by their tokens
        while (began := time.perf_counter()) < end:
            if began >= reconnect_at:
                journal.close()
                journal = PgJournal.connect(url, host=host, pool_size=1)
                reconnect_at = began + (reconnect_s or math.inf)
                continue
            if began >= renew_at:  # as a host renews its leases (and vacuums the queue)
                journal.renew(host, [c.token for c in claims])
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
    finally:
        journal.close()


# What the server's processes do, by the title PostgreSQL gives each (its command line).
ROLES = (("autovacuum worker", "autovacuum"), ("walwriter", "WAL writer"),
         ("checkpointer", "checkpointer"), ("background writer", "background writer"))  # fmt: skip


def role_of(title: str) -> str:
    """The role of a server process from its title: one of `ROLES`' names, else "backends".

    >>> role_of("postgres: autovacuum worker pacer")
    'autovacuum'
    >>> role_of("postgres: pacer pacer 127.0.0.1(40112) idle")
    'backends'
    """
    return next((name for key, name in ROLES if key in title), "backends")


def server_cpu_by_role(server: PostgresServer) -> dict[str, float]:
    """User + system CPU seconds of the server's processes so far, by role (`role_of`), from
    /proc. The postmaster's own time is "postmaster"; the time of its children that have ended
    (autovacuum workers, mostly) is "ended", read from the postmaster's count of them."""
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    roles: dict[str, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            pid, ppid = int(entry.name), int(fields[1])
            if pid == postmaster:
                roles["postmaster"] = roles.get("postmaster", 0.0) + cpu_fields(fields, 11)
                roles["ended"] = roles.get("ended", 0.0) + cpu_fields(fields, 13)
            elif ppid == postmaster:  # only the server's children: their titles name them
                title = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
                role = role_of(title.decode(errors="replace"))
                roles[role] = roles.get(role, 0.0) + cpu_fields(fields, 11)
        except OSError:
            continue  # ended meanwhile
    return roles


def cpu_fields(fields: list[str], at: int) -> float:
    """Seconds of two clock-tick fields of /proc/PID/stat (after the command's name) from
    index ``at``: 11 is the process's own user + system time, 13 its ended children's."""
    return (int(fields[at]) + int(fields[at + 1])) / CLOCK_TICKS


def server_cpu_s(server: PostgresServer) -> float:
    """User + system CPU seconds of the server's processes (the postmaster, its children
    running and those that have ended), from /proc."""
    return sum(server_cpu_by_role(server).values())


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


def prefill_results(url: str, count: int) -> None:
    """Store ``count`` results of another job, queued behind the measured one, straight into
    the results table, then vacuum and analyze: the table and its index as large as after
    ``count`` commits, though not of the measured job's own rows."""
    with PgJournal.connect(url) as journal:
        job = journal.add_job(count, "noop", {})
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO partitions (job_id, idx, state, synthesis_s, gpu_s, phases, digest,"
            " gpu, completed_at) SELECT %s, i, 'completed', 1.0, 0.1, '', 'd' || i, 0, 0"
            " FROM generate_series(0, %s) AS i",
            (job.id, count - 1),
        )
        conn.execute("VACUUM ANALYZE")


def measure(
    server: PostgresServer, claimers: int, batch: int, seconds: float, interval: float,
    vacuum: bool = True, statements: bool = False, prefill: int = 0,
    reconnect_s: float | None = None,
) -> list[object]:  # fmt: skip
    """One row of the table: ``claimers`` processes claiming and committing on one job, after
    ``prefill`` results of another (`prefill_results`)."""
    url = server.create_database()
    if statements:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
    with PgJournal.connect(url) as journal:
        journal.add_job(JOB_PARTITIONS, "noop", {})
    if prefill:
        prefill_results(url, prefill)
    spawn = multiprocessing.get_context("spawn")
    barrier = spawn.Barrier(claimers + 1)
    queue: multiprocessing.Queue[CommitterRun] = spawn.Queue()
    processes = [
        spawn.Process(target=committer, args=(url, f"host-{i}", batch, seconds, barrier,
                                                   queue, vacuum, reconnect_s))
        for i in range(claimers)
    ]  # fmt: skip
    for process in processes:
        process.start()
    barrier.wait()
    time.sleep(WARMUP_S)
    cpu_before, wall_before = server_cpu_s(server), time.perf_counter()
    stop = threading.Event()
    reference = None if server.cpus is None else CpuReference(cpu_list(server.cpus))
    if reference is not None:
        reference.start()
    sampler = threading.Thread(
        target=sample_progress,
        args=(url, interval, stop, statements),
        kwargs={"cpu": lambda: server_cpu_by_role(server), "reference": reference},
        daemon=True,
    )
    sampler.start()
    runs = [queue.get() for _ in processes]
    cpu = (server_cpu_s(server) - cpu_before) / (time.perf_counter() - wall_before)
    stop.set()
    sampler.join()
    if reference is not None:
        reference.stop()
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
    return [
        claimers, batch, len(commits) / seconds, quantile_ms(claims, 50),
        quantile_ms(claims, 99), quantile_ms(commits, 50), quantile_ms(commits, 99),
        " ".join(map(str, rates)), decay, line_decay(rates), f"{cpu:.2f}",
        sum(run.empty for run in runs),
    ]  # fmt: skip


def shown(row: list[object]) -> list[object]:
    """A row of `measure` as the table prints it: commits a second whole, the decays to one
    decimal ("-" where there is no line).

    >>> shown([25, 1, 1428.4, "2.9", "13.7", "13.1", "30.0", "1609 1444", 10.26, 19.63, "1.95", 0])
    [25, 1, 1428, '2.9', '13.7', '13.1', '30.0', '1609 1444', '10.3', '19.6', '1.95', 0]
    """
    rate, decay, trend = float(str(row[2])), float(str(row[8])), row[9]
    line = "-" if trend is None else f"{float(str(trend)):.1f}"
    return [*row[:2], round(rate), *row[3:8], f"{decay:.1f}", line, *row[10:]]


def meets_target(row: list[object]) -> bool:
    """Whether a row of `measure` meets the target, judged on its unrounded figures: at least
    `TARGET_COMMITS_S` commits a second, a commit p99 of at most `TARGET_P99_MS`, and a decay
    under `TARGET_DECAY_PCT` % by both measures (first against last, and along the line).

    >>> row = [25, 1, 1428.4, "2.9", "13.7", "13.1", "30.0", "", 10.25, 19.63, "1.95", 0]
    >>> meets_target(row)  # 19.63 % along the line: under 20, though it prints as 19.6
    True
    >>> meets_target(row[:9] + [20.01] + row[10:])
    False
    >>> meets_target(row[:2] + [999.6] + row[3:])  # would print as 1000
    False
    """
    rate, p99, decay, trend = float(str(row[2])), str(row[6]), float(str(row[8])), row[9]
    decays = [decay] if trend is None else [decay, float(str(trend))]
    return (
        rate >= TARGET_COMMITS_S
        and p99 != "-"
        and float(p99) <= TARGET_P99_MS
        and max(decays) < TARGET_DECAY_PCT
    )


HEADERS = ["claimers", "batch", "commits/s", "claim p50 ms", "claim p99 ms", "commit p50 ms",
           "commit p99 ms", "commits/s per interval", "decay %", "decay % (line)",
           "db CPU (cores)",
           "empty claims"]  # fmt: skip


def rows(
    claimers: list[int], batch: int, seconds: float, interval: float, db_cpus: str | None = None,
    vacuum: bool = True, statements: bool = False, prefill: int = 0,
    server_settings: dict[str, str] | None = None, reconnect_s: float | None = None,
) -> list[list[object]]:  # fmt: skip
    """The table's rows, each on a fresh database of one durable server. ``db_cpus`` (a
    ``taskset`` list): the server runs on those CPUs and the claimers on the others.
    ``statements``: the server loads pg_stat_statements, and each interval's progress names
    the statements that took it most time. ``prefill``: results of another job stored
    before each row (`prefill_results`). ``server_settings``: more of the server's settings,
    by name (``random_page_cost``, ``autovacuum``, …). ``reconnect_s``: see `committer`."""
    if db_cpus is not None:
        os.sched_setaffinity(0, os.sched_getaffinity(0) - cpu_list(db_cpus))
    settings: dict[str, str] = {}
    if statements:
        settings = {"shared_preload_libraries": "pg_stat_statements",
                    "pg_stat_statements.track": "all"}  # fmt: skip
    settings.update(server_settings or {})
    server = PostgresServer(durable=True, tcp=True, cpus=db_cpus, settings=settings)
    server.start()
    try:
        return [measure(server, c, batch, seconds, interval, vacuum, statements, prefill,
                        reconnect_s) for c in claimers]  # fmt: skip
    finally:
        server.stop()
