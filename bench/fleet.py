"""Fleet benchmarks, first part: how many partition claims one PostgreSQL database sustains.

    .venv/bin/python -m bench.fleet [--seconds 3] [--claimers 1,2,4,8] [--batches 1,8,64]
                                    [--markdown]

Starts its own PostgreSQL (Debian's package, as the tests do, but durable: fsync on), and for
each batch size n and number of claimers, a fresh database holding four jobs of a million
partitions at two priorities. Each claimer is a process of its own with one connection, as a
host of a fleet is, calling `PgJournal.claim(host, n)` back to back for ``--seconds`` after a
warm-up; what it claims is not proved (the leases pile up, which claims never scan). Reports
claims (calls) and partitions claimed per second, all claimers together, and the latency of one
claim (p50, p99). Target: one database sustains >= 5,000 partition claims/s (ten times a
100-host fleet of 8 GPUs at a partition per 1.5 s).
"""

from __future__ import annotations

import argparse
import multiprocessing
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier

from pacer.pgjournal import PgJournal
from pacer.table import render
from tests.postgres_server import PostgresServer

TARGET_CLAIMS_S = 5_000
JOBS = ((1_000_000, 1), (1_000_000, 1), (1_000_000, 0), (1_000_000, 0))  # (partitions, priority)
WARMUP_S = 0.5


@dataclass(frozen=True)
class ClaimerRun:
    """What one claimer did in the timed window: its claims' latencies (s), partitions taken,
    and claims that came back empty."""

    latencies: list[float]
    partitions: int
    empty: int


def claimer(url: str, host: str, n: int, seconds: float, barrier: Barrier) -> ClaimerRun:
    """Claim ``n`` at a time for ``seconds`` after a warm-up, once every claimer is ready."""
    with PgJournal.connect(url, host=host, pool_size=1) as journal:
        barrier.wait()
        start = time.perf_counter() + WARMUP_S
        end = start + seconds
        latencies: list[float] = []
        partitions = empty = 0
        while (now := time.perf_counter()) < end:
            claims = journal.claim(host, n)
            done = time.perf_counter()
            if now >= start:
                latencies.append(done - now)
                taken = sum(len(claim.pending) for claim in claims)
                partitions += taken
                empty += taken == 0
    return ClaimerRun(latencies, partitions, empty)


def _run_claimer(
    url: str, host: str, n: int, seconds: float, barrier: Barrier,
    results: multiprocessing.Queue[ClaimerRun],
) -> None:  # fmt: skip
    results.put(claimer(url, host, n, seconds, barrier))


def measure(server: PostgresServer, n: int, claimers: int, seconds: float) -> list[object]:
    """One row of the table: ``claimers`` processes claiming ``n`` at a time."""
    url = server.create_database()
    with PgJournal.connect(url) as journal:
        for partitions, priority in JOBS:
            journal.add_job(partitions, "noop", {}, priority)
    spawn = multiprocessing.get_context("spawn")
    barrier = spawn.Barrier(claimers)
    results: multiprocessing.Queue[ClaimerRun] = spawn.Queue()
    processes = [
        spawn.Process(target=_run_claimer, args=(url, f"host-{i}", n, seconds, barrier, results))
        for i in range(claimers)
    ]
    for process in processes:
        process.start()
    runs = [results.get() for _ in processes]
    for process in processes:
        process.join()
    latencies = sorted(x for run in runs for x in run.latencies)
    partitions = sum(run.partitions for run in runs)
    p50 = statistics.quantiles(latencies, n=100)[49]
    p99 = statistics.quantiles(latencies, n=100)[98]
    return [
        n, claimers, round(len(latencies) / seconds), round(partitions / seconds),
        f"{p50 * 1000:.2f}", f"{p99 * 1000:.2f}", sum(run.empty for run in runs),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="timed window per row")
    parser.add_argument("--claimers", default="1,2,4,8", help="claimer processes, comma list")
    parser.add_argument("--batches", default="1,8,64", help="partitions per claim, comma list")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.claimers.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    server = PostgresServer(durable=True)
    server.start()
    try:
        rows = [measure(server, n, c, args.seconds) for n in batches for c in counts]
    finally:
        server.stop()
    headers = ["batch n", "claimers", "claims/s", "partitions/s", "p50 ms", "p99 ms", "empty"]
    print(render(headers, rows, markdown=args.markdown))
    best = max(float(str(row[3])) for row in rows)
    verdict = "pass" if best >= TARGET_CLAIMS_S else "miss"
    print(
        f"\nbest {best:,.0f} partition claims/s (target >= {TARGET_CLAIMS_S:,}: {verdict}); "
        f"CPython {platform.python_version()}, {multiprocessing.cpu_count()} cores"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
