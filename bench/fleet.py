"""Fleet benchmarks: how many partition claims one PostgreSQL database sustains, and how many
partitions a second a fleet of `pacer serve` hosts proves.

    .venv/bin/python -m bench.fleet [claims] [--seconds 3] [--claimers 1,2,4,8]
                                    [--batches 1,8,64] [--markdown]
    .venv/bin/python -m bench.fleet hosts [--hosts 1,2,4] [--jobs 20] [--partitions 4000]
                                    [--markdown]
    .venv/bin/python -m bench.fleet commits [--claimers 10,25,50] [--seconds 20] [--batch 1]
                                    [--interval 2] [--markdown]

Each starts its own PostgreSQL (Debian's package, as the tests do, but durable: fsync on;
and reached over loopback TCP, as a fleet's hosts reach theirs).

``claims``: for each batch size n and number of claimers, a fresh database holding four jobs
of a million partitions at two priorities. Each claimer is a process of its own with one
connection, as a host of a fleet is, calling `PgJournal.claim(host, n)` back to back for
``--seconds`` after a warm-up; what it claims is not proved (the leases pile up, which claims
never scan). Reports claims (calls) and partitions claimed per second, all claimers together,
and the latency of one claim (p50, p99). Target: one database sustains >= 5,000 partition
claims/s (ten times a 100-host fleet of 8 GPUs at a partition per 1.5 s).

``commits``: claims *and* commits on one job, as hosts use the database
(`bench.fleet_commits`): commits/s, claim and commit latency, decay over the run, the
database's CPU.

``hosts``: for each number of hosts, a fresh database and that many `pacer serve` processes
sharing it, with the noop workload as bench/service.py runs it (pacer's own work is all there
is: claims, dispatch, the commits), ``--jobs`` jobs of ``--partitions`` submitted to the first
host at once, the last one asked for the jobs completed every 50 ms. Reports
partitions proved a second from the first submission to the last job's completion, claims a
second (all hosts together), each host's share, and, beside them, one host on an SQLite
journal of its own. Every host, the
database and this process share the machine's cores: where the cores run out, more hosts add
no throughput.
"""

from __future__ import annotations

import argparse
import multiprocessing
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path

from bench import fleet_commits
from bench.installed import bytecode_env
from pacer.cli.table import render
from pacer.client import BlockingClient
from pacer.pgjournal import PgJournal
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


ROOT = Path(__file__).resolve().parents[1]
# The noop pipeline as bench/service.py runs it: pacer's own work is all there is, and the
# controller's caps (synthesis slots, wake-ups) do not bound it.
PIPELINE = {
    "PACER_WORKLOAD": "noop",
    "PACER_VERIFY_EVERY": "0",
    "PACER_SYNTHESIS__CORES": "8",
    "PACER_CONTROLLER__INTERVAL_MIN_S": "0.00001",
    "PACER_CONTROLLER__BOOTSTRAP_DEPTH": "64",
}


class Host:
    """A `pacer serve` process with the noop workload on ``journal`` (a PostgreSQL URL, or an
    SQLite file), as ``name`` in its fleet."""

    def __init__(self, journal: str, name: str, folder: Path) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.name = name
        self.log_path = folder / f"{name}.log"
        env = {k: v for k, v in bytecode_env().items() if not k.startswith("PACER_")}
        self.env = {**env, **PIPELINE, "PACER_API__PORT": str(self.port),
                    "PACER_JOURNAL__URL": journal, "PACER_JOURNAL__HOST": name}  # fmt: skip
        self.client = BlockingClient(f"http://127.0.0.1:{self.port}")
        self.proc: subprocess.Popen[bytes] | None = None

    def launch(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pacer", "serve"], env=self.env, cwd=ROOT,
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def counted(self, series: str) -> float:
        """A series of this host's metrics (``name{labels}`` as exposed); 0 when absent."""
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        found = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
        return 0.0 if found is None else float(found.group(1))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def measure_hosts(journal: str, count: int, jobs: int, partitions: int) -> list[object]:
    """One row: ``count`` hosts on ``journal`` proving ``jobs`` jobs submitted to the first."""
    with tempfile.TemporaryDirectory(prefix="pacer-fleet-") as folder:
        hosts = [Host(journal, f"host-{i}", Path(folder)) for i in range(count)]
        try:
            for host in hosts:
                host.launch()
            for host in hosts:
                host.client.wait_ready(120)
            started = time.perf_counter()
            for _ in range(jobs):
                hosts[0].client.submit(partitions)
            while hosts[-1].client.status()["jobs"]["completed"] < jobs:
                time.sleep(0.05)
            elapsed = time.perf_counter() - started
            proved = [host.counted('pacer_partitions_total{outcome="completed"}') for host in hosts]
            shares = [round(count / (jobs * partitions), 2) for count in proved]
            claims = sum(host.counted("pacer_fleet_claims_total") for host in hosts)
        finally:
            for host in hosts:
                host.stop()
    kind = "PostgreSQL" if journal.startswith("postgresql://") else "SQLite"
    rate = round(jobs * partitions / elapsed)
    return [kind, count, jobs * partitions, f"{elapsed:.1f}", rate, round(claims / elapsed),
            " ".join(map(str, shares))]  # fmt: skip


def hosts_main(args: argparse.Namespace) -> int:
    counts = [int(c) for c in args.hosts.split(",")]
    server = PostgresServer(durable=True, tcp=True)
    server.start()
    try:
        with tempfile.TemporaryDirectory(prefix="pacer-fleet-") as folder:
            sqlite = f"sqlite:///{folder}/journal.sqlite"
            rows = [measure_hosts(sqlite, 1, args.jobs, args.partitions)]
        rows += [
            measure_hosts(server.create_database(), n, args.jobs, args.partitions) for n in counts
        ]
    finally:
        server.stop()
    headers = ["journal", "hosts", "partitions", "s", "partitions/s", "claims/s",
               "share of each host"]  # fmt: skip
    print(render(headers, rows, markdown=args.markdown))
    print(
        f"\nnoop workload; CPython {platform.python_version()}, {multiprocessing.cpu_count()} "
        "cores shared by the hosts, PostgreSQL and this process"
    )
    return 0


def commits_main(args: argparse.Namespace) -> int:
    seconds = 20.0 if args.seconds is None else args.seconds
    counts = [int(c) for c in (args.claimers or "10,25,50").split(",")]
    table = fleet_commits.rows(
        counts, args.batch, seconds, args.interval, args.db_cpus, not args.no_vacuum,
        args.statements, args.prefill, dict(args.server_setting), args.reconnect_s,
    )  # fmt: skip
    print(render(fleet_commits.HEADERS, [fleet_commits.shown(row) for row in table],
                 markdown=args.markdown))  # fmt: skip
    at_25 = [row for row in table if row[0] == 25]
    verdict = ""
    if at_25:
        shown = fleet_commits.shown(at_25[0])
        met = fleet_commits.meets_target(at_25[0])
        verdict = (
            f"; at 25 claimers {shown[2]:,} commits/s, p99 {shown[6]} ms, decay {shown[8]} % "
            f"(line {shown[9]} %): " + ("target met" if met else "target missed")
        )
    print(
        f"\none job, {args.batch} partition(s) a claim and a commit, {seconds:g} s a row"
        f"{verdict} (target >= {fleet_commits.TARGET_COMMITS_S:,}/s, p99 <= "
        f"{fleet_commits.TARGET_P99_MS:g} ms, decay < {fleet_commits.TARGET_DECAY_PCT:g} %); "
        f"CPython {platform.python_version()}, "
        + (
            f"{multiprocessing.cpu_count()} cores shared by the claimers and PostgreSQL"
            if args.db_cpus is None
            else f"PostgreSQL on CPUs {args.db_cpus}, the claimers on the other "
            f"{multiprocessing.cpu_count() - len(fleet_commits.cpu_list(args.db_cpus))}"
        )
    )
    return 0


def server_setting(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` as (name, value), for ``--server-setting``.

    >>> server_setting("random_page_cost=1.1")
    ('random_page_cost', '1.1')
    >>> server_setting("autovacuum")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: a server setting is NAME=VALUE, as autovacuum=off; got 'autovacuum'
    """
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise argparse.ArgumentTypeError(
            f"a server setting is NAME=VALUE, as autovacuum=off; got {text!r}"
        )
    return name.strip(), value.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "what", nargs="?", choices=("claims", "commits", "hosts"), default="claims",
        help="claims a database sustains, claims and commits, or partitions/s of pacer hosts",
    )  # fmt: skip
    parser.add_argument("--seconds", type=float, default=None,
                        help="timed window per row (default 3; commits: 20)")  # fmt: skip
    parser.add_argument("--claimers", default=None,
                        help="claimer processes, comma list (default 1,2,4,8; commits: "
                        "10,25,50)")  # fmt: skip
    parser.add_argument("--batch", type=int, default=1, help="partitions a claim (commits)")
    parser.add_argument("--interval", type=float, default=2.0,
                        help="throughput reported per this many seconds (commits)")  # fmt: skip
    parser.add_argument("--db-cpus", default=None,
                        help="commits: run PostgreSQL on these CPUs (a taskset list, as 0,1) "
                        "and the claimers on the others")  # fmt: skip
    parser.add_argument("--no-vacuum", action="store_true",
                        help="commits: the hosts leave the queue table to autovacuum")  # fmt: skip
    parser.add_argument("--statements", action="store_true",
                        help="commits: name the statements that took the server most time, "
                        "each interval (loads pg_stat_statements)")  # fmt: skip
    parser.add_argument("--prefill", type=int, default=0, metavar="N",
                        help="commits: first store N results of another job, so that the "
                        "results table starts as large as after N commits")  # fmt: skip
    parser.add_argument("--server-setting", action="append", default=[], metavar="NAME=VALUE",
                        type=server_setting,
                        help="commits: a setting of the server (repeatable), as "
                        "random_page_cost=1.1 or autovacuum=off")  # fmt: skip
    parser.add_argument(
        "--reconnect-s",
        type=float,
        default=None,
        metavar="S",
        help="commits: each claimer opens a new connection every S seconds",
    )
    parser.add_argument("--batches", default="1,8,64", help="partitions per claim, comma list")
    parser.add_argument("--hosts", default="1,2,4", help="pacer serve hosts, comma list")
    parser.add_argument("--jobs", type=int, default=20, help="jobs submitted (hosts)")
    parser.add_argument("--partitions", type=int, default=4000, help="per job (hosts)")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = parser.parse_args(argv)
    if args.what == "hosts":
        return hosts_main(args)
    if args.what == "commits":
        return commits_main(args)
    args.seconds = 3.0 if args.seconds is None else args.seconds
    counts = [int(c) for c in (args.claimers or "1,2,4,8").split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    server = PostgresServer(durable=True, tcp=True)
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
