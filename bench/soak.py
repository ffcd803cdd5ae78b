"""Soak: `pacer serve` as a real process under twice its capacity, for minutes.

    .venv/bin/python -m bench.soak [--minutes 10] [--load 2.0] [--rss-limit-mib 1024] [--markdown]

What it does:
1. starts `pacer serve` (the ntt workload on the CPU at a small size, or ``--workload``) with its
   own journal and port, and measures its capacity: partitions proved per second while a
   backlog is waiting (``--capacity-s`` seconds);
2. submits one job of 10^6 partitions at the lowest priority: it waits in the backlog all along,
   and its detail (``GET /v1/jobs/{id}`` and a page of its partitions) is fetched every few
   seconds, as an operator's dashboard would;
3. offers jobs at ``--load`` × the proving rate (partitions/s; measured anew every 10 s) for
   ``--minutes``: what is refused gets 429 and is counted, not retried;
4. meanwhile probes ``/healthz`` every 100 ms and samples the service's RSS, open file
   descriptors and threads from /proc every 5 s. The RSS limit is enforced by this bench: the
   service is killed and the run fails if its RSS passes ``--rss-limit-mib``;
5. stops offering, cancels the big job, waits for every accepted job to end, and stops the service
   with SIGTERM.

With ``--faults F`` the service runs the fault-injecting workload of the tests
(``tests.faults:make`` around the ntt workload) and a share F of the jobs carry one fault each,
in turn: a synthesis, a prove or a BaseException that fails once, a bad digest or a failed
verification once, a prove that hangs past its time limit once (all retried and completed), and
a prove that always fails (the job fails with its reason). The table then counts the jobs by
fault and by how they ended.

Prints a table (and writes JSON with ``--json``): offered and accepted rates, the 429 share, jobs
completed / failed / lost / stuck, RSS, fds and threads at the start and end of the load and their
maxima, the /healthz and job-detail latencies. Exits 1 if a target is missed: no job lost or
stuck, /healthz p99 < 50 ms, RSS under the limit, flat RSS, fds and threads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.installed import bytecode_env
from pacer.cli.table import render

ROOT = Path(__file__).resolve().parents[1]
BIG_JOB_PARTITIONS = 1_000_000
JSON_HEADERS = {"Content-Type": "application/json"}
# One fault per faulty job, in turn; "permanent" is the one a job cannot survive.
FAULTS: dict[str, dict[str, Any]] = {
    "synthesis raises once": {"call": "synthesis", "kind": "raise", "index": 0, "times": 1},
    "prove raises once": {"call": "prove", "kind": "raise", "index": 0, "times": 1},
    "BaseException once": {"call": "prove", "kind": "base", "index": 0, "times": 1},
    "bad digest once": {"call": "prove", "kind": "bad_digest", "index": 0, "times": 1},
    "verification fails once": {"call": "verify", "kind": "false", "index": 0, "times": 1},
    "prove hangs once": {"call": "prove", "kind": "hang", "index": 0, "times": 1},
    "permanent": {"call": "prove", "kind": "raise", "index": 0},
}
HUNG_PROVE_LIMIT_S = 2.0  # PACER_TIMEOUTS__PROVE_S under --faults: a hang is cut short
RATE_WINDOW_S = 10.0  # the offered rate follows the proving rate measured over this window


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def wait_ready(
    session: aiohttp.ClientSession, base: str, proc: subprocess.Popen[bytes], log_path: Path
) -> None:
    """Until `pacer serve` at ``base`` answers /readyz 200; RuntimeError if it exits first, or
    is not ready after 120 s."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pacer serve exited: see {log_path}")
        try:
            async with session.get(base + "/readyz") as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError("pacer serve not ready after 120 s")


@dataclass
class Sample:
    """The service process as /proc shows it, at ``t`` seconds into the load."""

    t: float
    rss_mib: float
    fds: int
    threads: int


def sample_process(pid: int, t: float) -> Sample:
    rss_kib = threads = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kib = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return Sample(t, rss_kib / 1024, fds, threads)


@dataclass
class Tally:
    """What the load generator saw."""

    offered_partitions: int = 0
    accepted_jobs: list[str] = field(default_factory=list)
    accepted_partitions: int = 0
    refused_429: int = 0
    refused_other: dict[str, int] = field(default_factory=dict)
    healthz_s: list[float] = field(default_factory=list)
    healthz_failures: int = 0
    detail_s: list[float] = field(default_factory=list)
    detail_bytes: int = 0
    page_s: list[float] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)  # proved partitions/s, window by window


class Soak:
    """One soak run against one `pacer serve` process."""

    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / "serve.log"
        self.env = {
            **bytecode_env(),
            "PACER_WORKLOAD": args.workload,
            "PACER_NTT__LOG_N": str(args.log_n),
            "PACER_VERIFY_EVERY": "10",
            "PACER_JOURNAL__PATH": str(tmp / "journal.sqlite"),
            "PACER_API__PORT": str(self.port),
            "PACER_API__MAX_BACKLOG": str(BIG_JOB_PARTITIONS + args.backlog_headroom),
            "PYTHONPATH": str(ROOT),
        }
        if args.faults:
            self.env |= {
                "PACER_WORKLOAD": "tests.faults:make",
                "FAULTS_INNER": args.workload,
                "PACER_TIMEOUTS__PROVE_S": str(HUNG_PROVE_LIMIT_S),
                "PACER_RETRY__BACKOFF_S": "0.5",
            }
        self.fault_of: dict[str, str] = {}  # job id → the fault it carries
        self._faulty = 0.0  # faulty jobs owed so far (share × jobs offered)
        self._faults_offered = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.tally = Tally()
        self.killed_for_rss = False
        self.ended: dict[str, tuple[str, str | None]] = {}  # job id → (state, error)
        self.exit_status: int | None = None

    async def start(self, session: aiohttp.ClientSession) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pacer", "serve"], env=self.env, cwd=ROOT,
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        await wait_ready(session, self.base, self.proc, self.log_path)

    async def submit(
        self,
        session: aiohttp.ClientSession,
        partitions: int,
        priority: int = 0,
        fault: str | None = None,
    ) -> str | None:
        body: dict[str, Any] = {"partitions": partitions, "priority": priority}
        if fault is not None:
            body["params"] = {"faults": [FAULTS[fault]]}
        self.tally.offered_partitions += partitions
        async with session.post(self.base + "/v1/jobs", json=body, headers=JSON_HEADERS) as r:
            payload = await r.json(content_type=None)
            if r.status == 202:
                job_id = str(payload["id"])
                self.tally.accepted_jobs.append(job_id)
                if fault is not None:
                    self.fault_of[job_id] = fault
                self.tally.accepted_partitions += partitions
                return job_id
            if r.status == 429:
                self.tally.refused_429 += 1
            else:
                key = str(r.status)
                self.tally.refused_other[key] = self.tally.refused_other.get(key, 0) + 1
            return None

    async def proved(self, session: aiohttp.ClientSession) -> float:
        """Partitions proved so far, from /metrics."""
        async with session.get(self.base + "/metrics") as response:
            text = await response.text()
        total = 0.0
        for line in text.splitlines():
            if line.startswith("pacer_partitions_total{") and 'outcome="completed"' in line:
                total += float(line.rsplit(" ", 1)[1])
        return total

    async def measure_capacity(self, session: aiohttp.ClientSession) -> float:
        """Partitions proved per second with a backlog always waiting."""
        job_size = self.args.job_partitions
        for _ in range(4):
            await self.submit(session, job_size * 50)
        await asyncio.sleep(self.args.capacity_s / 3)  # past the cold start
        start_count, started = await self.proved(session), time.monotonic()
        await asyncio.sleep(self.args.capacity_s)
        rate = (await self.proved(session) - start_count) / (time.monotonic() - started)
        for job_id in list(self.tally.accepted_jobs):
            await self.cancel(session, job_id)
        self.tally = Tally()
        return rate

    async def cancel(self, session: aiohttp.ClientSession, job_id: str) -> None:
        async with session.delete(self.base + f"/v1/jobs/{job_id}", headers=JSON_HEADERS) as r:
            await r.read()

    async def offer(self, session: aiohttp.ClientSession, rate: float, until: float) -> None:
        """Jobs of ``job_partitions`` from ``rate`` partitions/s until ``until``. Every
        ``RATE_WINDOW_S`` the rate becomes ``--load`` × what the service proved in the window:
        a capacity measured once is off when the host's other load changes, and under overload
        the service proves at its capacity, so the offer stays at the multiple asked for."""
        per_job = self.args.job_partitions
        window_start, window_proved = time.monotonic(), await self.proved(session)
        next_at = window_start
        while time.monotonic() < until:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            await self.submit(session, per_job, fault=self.next_fault())
            next_at += per_job / rate
            now = time.monotonic()
            if now - window_start >= RATE_WINDOW_S:
                proved = await self.proved(session)
                measured = (proved - window_proved) / (now - window_start)
                if measured > 0:
                    rate = self.args.load * measured
                    self.tally.rates.append(measured)
                window_start, window_proved = now, proved
                next_at = max(next_at, now)

    def next_fault(self) -> str | None:
        """The fault of the next job offered: every 1/share-th job carries one, in turn."""
        self._faulty += self.args.faults
        if self._faulty < 1:
            return None
        self._faulty -= 1
        self._faults_offered += 1
        names = list(FAULTS)
        return names[(self._faults_offered - 1) % len(names)]

    def fault_table(self) -> dict[str, dict[str, int]]:
        """Per fault injected: jobs accepted carrying it, and how they ended."""
        table: dict[str, dict[str, int]] = {}
        for job_id, fault in self.fault_of.items():
            row = table.setdefault(fault, {"accepted": 0})
            row["accepted"] += 1
            state = self.ended.get(job_id, ("unknown", None))[0]
            row[state] = row.get(state, 0) + 1
        return table

    async def probe_health(self, session: aiohttp.ClientSession, until: float) -> None:
        timeout = aiohttp.ClientTimeout(total=5)
        while time.monotonic() < until:
            started = time.perf_counter()
            try:
                async with session.get(self.base + "/healthz", timeout=timeout) as response:
                    await response.read()
                    ok = response.status == 200
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            if ok:
                self.tally.healthz_s.append(time.perf_counter() - started)
            else:
                self.tally.healthz_failures += 1
            await asyncio.sleep(0.1)

    async def watch_detail(self, session: aiohttp.ClientSession, job_id: str, until: float) -> None:
        while time.monotonic() < until:
            started = time.perf_counter()
            async with session.get(self.base + f"/v1/jobs/{job_id}") as response:
                body = await response.read()
            self.tally.detail_s.append(time.perf_counter() - started)
            self.tally.detail_bytes = max(self.tally.detail_bytes, len(body))
            started = time.perf_counter()
            path = f"/v1/jobs/{job_id}/partitions?offset=500000&limit=1000"
            async with session.get(self.base + path) as response:
                await response.read()
            self.tally.page_s.append(time.perf_counter() - started)
            await asyncio.sleep(self.args.detail_every_s)

    async def watch_process(self, started: float, until: float) -> None:
        assert self.proc is not None
        limit = self.args.rss_limit_mib
        while time.monotonic() < until and self.proc.poll() is None:
            sample = sample_process(self.proc.pid, time.monotonic() - started)
            self.tally.samples.append(sample)
            if sample.rss_mib > limit:
                self.killed_for_rss = True
                self.proc.kill()
                raise RuntimeError(f"RSS {sample.rss_mib:.0f} MiB over the {limit} MiB limit")
            await asyncio.sleep(5)

    async def settle_jobs(self, session: aiohttp.ClientSession) -> dict[str, int]:
        """Wait (bounded) for every accepted job to end; count them by state."""
        deadline = time.monotonic() + self.args.settle_s
        states: dict[str, int] = {}
        while True:
            states = {}
            for job_id in self.tally.accepted_jobs:
                async with session.get(self.base + f"/v1/jobs/{job_id}") as response:
                    job = await response.json()
                states[job["state"]] = states.get(job["state"], 0) + 1
                self.ended[job_id] = (job["state"], job.get("error"))
            active = states.get("queued", 0) + states.get("running", 0)
            if active == 0 or time.monotonic() > deadline:
                return states
            await asyncio.sleep(1)

    async def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 120
        while self.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        if self.proc.poll() is None:
            self.proc.kill()
        self.exit_status = self.proc.wait()

    async def run(self) -> dict[str, Any]:
        args = self.args
        async with aiohttp.ClientSession() as session:
            await self.start(session)
            try:
                print("measuring capacity ...", file=sys.stderr, flush=True)
                capacity = await self.measure_capacity(session)
                offered = args.load * capacity
                print(f"capacity {capacity:,.1f} partitions/s; offering {offered:,.1f}/s for "
                      f"{args.minutes:g} min", file=sys.stderr, flush=True)  # fmt: skip
                big = await self.submit(session, BIG_JOB_PARTITIONS, priority=-1000)
                if big is None:
                    raise RuntimeError("the 10^6-partition job was refused")
                # The offered and accepted rates are the load's, not the big job's.
                self.tally.offered_partitions -= BIG_JOB_PARTITIONS
                self.tally.accepted_partitions -= BIG_JOB_PARTITIONS
                started = time.monotonic()
                until = started + args.minutes * 60
                tasks = [
                    self.offer(session, offered, until),
                    self.probe_health(session, until),
                    self.watch_detail(session, big, until),
                    self.watch_process(started, until),
                    self.progress(started, until),
                ]
                await asyncio.gather(*tasks)
                self.tally.accepted_jobs.remove(big)
                await self.cancel(session, big)
                print("load stopped; waiting for accepted jobs to end ...", file=sys.stderr)
                states = await self.settle_jobs(session)
            finally:
                if self.proc is not None and self.proc.poll() is None:
                    await self.stop()
        return self.summary(capacity, offered, states)

    async def progress(self, started: float, until: float) -> None:
        while time.monotonic() < until:
            await asyncio.sleep(30)
            t = self.tally
            last = t.samples[-1] if t.samples else None
            rss = f", RSS {last.rss_mib:.0f} MiB" if last else ""
            print(f"  {time.monotonic() - started:4.0f} s: {len(t.accepted_jobs)} jobs accepted, "
                  f"{t.refused_429} refused (429){rss}", file=sys.stderr, flush=True)  # fmt: skip

    def summary(self, capacity: float, offered: float, states: dict[str, int]) -> dict[str, Any]:
        t = self.tally
        accepted = len(t.accepted_jobs)
        ended = sum(states.get(s, 0) for s in ("completed", "failed", "cancelled"))
        tail = t.samples[len(t.samples) // 5 :] or t.samples  # after the first fifth
        return {
            "capacity_per_s": capacity,
            "proved_per_s_median": quantile(t.rates, 0.5),
            "offered_per_s": t.offered_partitions / (self.args.minutes * 60),
            "accepted_per_s": t.accepted_partitions / (self.args.minutes * 60),
            "offered_jobs": accepted + t.refused_429 + sum(t.refused_other.values()),
            "accepted_jobs": accepted,
            "refused_429": t.refused_429,
            "refused_other": t.refused_other,
            "completed": states.get("completed", 0),
            "failed": states.get("failed", 0),
            "lost": accepted - ended - states.get("queued", 0) - states.get("running", 0),
            "stuck": states.get("queued", 0) + states.get("running", 0),
            "healthz_p50_ms": quantile(t.healthz_s, 0.5) * 1000,
            "healthz_p99_ms": quantile(t.healthz_s, 0.99) * 1000,
            "healthz_max_ms": max(t.healthz_s, default=float("nan")) * 1000,
            "healthz_probes": len(t.healthz_s),
            "healthz_failures": t.healthz_failures,
            "detail_p99_ms": quantile(t.detail_s, 0.99) * 1000,
            "detail_bytes": t.detail_bytes,
            "page_p99_ms": quantile(t.page_s, 0.99) * 1000,
            "detail_gets": len(t.detail_s),
            "samples": [asdict(s) for s in t.samples],
            "rss_first_mib": tail[0].rss_mib if tail else float("nan"),
            "rss_last_mib": t.samples[-1].rss_mib if t.samples else float("nan"),
            "rss_max_mib": max((s.rss_mib for s in t.samples), default=float("nan")),
            "fds": (tail[0].fds, t.samples[-1].fds, max(s.fds for s in t.samples)),
            "threads": (tail[0].threads, t.samples[-1].threads, max(s.threads for s in t.samples)),
            "killed_for_rss": self.killed_for_rss,
            "failed_without_reason": sum(
                1 for state, error in self.ended.values() if state == "failed" and not error
            ),
            "faults": self.fault_table(),
            "exit_status": self.exit_status,
        }


def rows(s: dict[str, Any], args: argparse.Namespace) -> list[tuple[str, str, str, str]]:
    def verdict(ok: bool) -> str:
        return "pass" if ok else "FAIL"

    rss_growth = s["rss_last_mib"] - s["rss_first_mib"]
    fds_first, fds_last, fds_max = s["fds"]
    threads_first, threads_last, threads_max = s["threads"]
    share_429 = s["refused_429"] / max(1, s["offered_jobs"])
    # A hung prove's thread lingers until the call returns (tests.faults: at most 120 s).
    thread_slack = 8 if args.faults else 4
    return [
        ("capacity", f"{s['capacity_per_s']:,.1f} partitions/s at the start; "
         f"{s['proved_per_s_median']:,.1f} proved/s under load (median of 10 s windows)", "",
         ""),
        ("offered", f"{s['offered_per_s']:,.1f} partitions/s ({args.load:g} × the proving rate), "
         f"{s['offered_jobs']:,} jobs of {args.job_partitions}", "", ""),
        ("accepted", f"{s['accepted_jobs']:,} jobs, {s['accepted_per_s']:,.1f} partitions/s",
         "", ""),
        ("refused with 429", f"{s['refused_429']:,} ({share_429:.0%} of jobs offered); other "
         f"refusals {s['refused_other'] or 0}", "429 under overload",
         verdict(s["refused_429"] > 0)),
        ("jobs completed / failed", f"{s['completed']:,} / {s['failed']:,}", "", ""),
        ("jobs lost / stuck", f"{s['lost']} / {s['stuck']}", "0 / 0",
         verdict(s["lost"] == 0 and s["stuck"] == 0)),
        ("failed jobs without a reason", f"{s['failed_without_reason']}", "0",
         verdict(s["failed_without_reason"] == 0)),
        *fault_rows(s["faults"]),
        ("/healthz latency", f"p50 {s['healthz_p50_ms']:.1f} ms, p99 {s['healthz_p99_ms']:.1f} "
         f"ms, max {s['healthz_max_ms']:.0f} ms ({s['healthz_probes']:,} probes, "
         f"{s['healthz_failures']} failed)", "p99 < 50 ms, none failed",
         verdict(s["healthz_p99_ms"] < 50 and s["healthz_failures"] == 0)),
        ("10^6-partition job detail", f"p99 {s['detail_p99_ms']:.1f} ms, {s['detail_bytes']:,} "
         f"bytes; a page of 1,000: p99 {s['page_p99_ms']:.1f} ms ({s['detail_gets']} GETs)",
         "(for information)", ""),
        ("RSS", f"{s['rss_first_mib']:.0f} → {s['rss_last_mib']:.0f} MiB after the first fifth, "
         f"max {s['rss_max_mib']:.0f} MiB", f"< {args.rss_limit_mib} MiB, growth < 64 MiB",
         verdict(not s["killed_for_rss"] and s["rss_max_mib"] < args.rss_limit_mib
                 and rss_growth < 64)),
        ("open fds", f"{fds_first} → {fds_last}, max {fds_max}", "flat (± 16)",
         verdict(abs(fds_last - fds_first) <= 16)),
        ("threads", f"{threads_first} → {threads_last}, max {threads_max}",
         f"flat (± {thread_slack})", verdict(abs(threads_last - threads_first) <= thread_slack)),
        ("exit on SIGTERM", f"status {s['exit_status']}", "0", verdict(s["exit_status"] == 0)),
    ]  # fmt: skip


def fault_rows(faults: dict[str, dict[str, int]]) -> list[tuple[str, str, str, str]]:
    """One row per fault injected: how its jobs ended, against what they should."""
    out = []
    for name in FAULTS:
        row = faults.get(name)
        if not row:
            continue
        accepted = row["accepted"]
        ended = ", ".join(f"{n} {state}" for state, n in sorted(row.items()) if state != "accepted")
        expected = "failed" if name == "permanent" else "completed"
        ok = row.get(expected, 0) == accepted
        out.append((f"fault: {name}", f"{accepted} jobs: {ended}", f"all {expected}",
                    "pass" if ok else "FAIL"))  # fmt: skip
    return out


def strict(value: Any) -> Any:
    """``value`` with non-finite floats as None, for strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict(v) for v in value]
    return value


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Soak `pacer serve` at a multiple of its capacity; print a table.",
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="load duration (10)")
    parser.add_argument("--load", type=float, default=2.0, help="offered load ÷ capacity (2)")
    parser.add_argument("--workload", default="ntt", help="PACER_WORKLOAD of the service (ntt)")
    parser.add_argument("--log-n", type=int, default=12, help="PACER_NTT__LOG_N (12)")
    parser.add_argument("--job-partitions", type=int, default=20, help="partitions a job (20)")
    parser.add_argument(
        "--backlog-headroom", type=int, default=2_000,
        help="PACER_API__MAX_BACKLOG above the 10^6-partition job (2000 partitions)",
    )  # fmt: skip
    parser.add_argument("--rss-limit-mib", type=int, default=1024, help="RSS limit (1024 MiB)")
    parser.add_argument("--capacity-s", type=float, default=20.0, help="capacity window (20 s)")
    parser.add_argument("--detail-every-s", type=float, default=5.0, help="detail GETs (5 s)")
    parser.add_argument("--settle-s", type=float, default=300.0, help="wait for jobs (300 s)")
    parser.add_argument(
        "--faults", type=float, default=0.0, metavar="SHARE",
        help="share of jobs carrying an injected fault, e.g. 0.02 (0: none)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the summary here")
    parser.add_argument("--markdown", action="store_true", help="Markdown table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        soak = Soak(args, Path(tmp))
        summary = asyncio.run(soak.run())
    table = rows(summary, args)
    print(render(("measure", "result", "target", ""), table, markdown=args.markdown))
    print(
        f"\n{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} "
        f"cores, workload {args.workload} (log_n {args.log_n}), {args.minutes:g} min, "
        f"faults in {args.faults:.0%} of jobs"
    )
    if args.json:
        args.json.write_text(json.dumps(strict(summary), indent=1, allow_nan=False, default=str))
    return 0 if all(row[3] != "FAIL" for row in table) else 1


if __name__ == "__main__":
    sys.exit(main())
