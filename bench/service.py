"""Service benchmarks: the pipeline itself, with a no-op workload, on uvloop.

    .venv/bin/python -m bench.service [--partitions 100000] [--markdown]

Measures, against the targets in docs/reliability.md ("Service targets"):
- partitions/s through dispatch → synthesis → ready → proving worker → journal (no-op work, so
  pacer's own overhead is all there is);
- the controller's decision time (p50/p99), timed around every ``decide`` call as on-CPU time
  of the loop's thread (wall time, which adds what other threads and the OS took meanwhile, is
  shown beside it), and event-loop
  lag (how late a 5 ms sleep wakes up, p99), while work arrives at ``--rate`` partitions/s (the
  load of the target), and for information also while everything is submitted at once;
- resident memory growth from after the first 10% of partitions to the end;
- ``GET /metrics`` latency over real HTTP with 8 GPU workers' labels (p99 of 300 scrapes).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import uvloop
from prometheus_client import CollectorRegistry

from pacer.cli.table import render
from pacer.config import Settings
from pacer.control.policy import Decision, Observation
from pacer.journal import JobState
from pacer.server import Server
from pacer.service.lifecycle import Service


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_settings(journal: Path, workers: int) -> Settings:
    return Settings(
        workload="noop",
        verify_every=0,
        gpu={"workers": workers},
        synthesis={"cores": 8, "threads_per_synthesis": 1},
        controller={"interval_min_s": 1e-5, "bootstrap_depth": 64},
        journal={"path": journal},
        api={"port": 0},
    )


async def pipeline_run(
    partitions: int, jobs: int, workers: int, tmp: Path, rate: float | None = None
) -> dict[str, Any]:
    """Run ``partitions`` no-op partitions in ``jobs`` jobs: all submitted at once, or (with
    ``rate``) one job every jobs-worth of ``rate`` partitions/s."""
    name = "paced" if rate else "saturated"
    server = Server(
        Service.build(bench_settings(tmp / f"{name}.sqlite", workers), CollectorRegistry())
    )
    await server.service.open()
    decide_ns: list[int] = []  # on-CPU time of the loop's thread
    decide_wall_ns: list[int] = []  # wall time: adds what other threads and the OS took
    original = server.service.controller.decide

    def timed(obs: Observation) -> Decision:
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        decision = original(obs)
        decide_wall_ns.append(time.perf_counter_ns() - wall)
        decide_ns.append(time.thread_time_ns() - cpu)
        return decision

    server.service.controller.decide = timed  # type: ignore[method-assign]
    await server.start()
    lags: list[float] = []
    running = True

    async def lag_monitor() -> None:
        # perf_counter, not loop.time(): uvloop's clock ticks in whole milliseconds.
        while running:
            before = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - before - 0.005)

    monitor = asyncio.create_task(lag_monitor())
    per_job = partitions // jobs

    async def submitter() -> None:
        for k in range(jobs):
            if rate:
                await asyncio.sleep(max(0.0, started + k * per_job / rate - time.perf_counter()))
            await server.service.submit(per_job, {}, 0)

    started = time.perf_counter()
    feeding = asyncio.create_task(submitter())
    rss_warm: int | None = None
    total = per_job * jobs
    last_report = started
    while True:
        done = server.service.pipeline.proved
        if rss_warm is None and done >= total // 10:
            rss_warm = rss_bytes()
        if (await server.service.db(server.service.journal.counts))[JobState.COMPLETED] == jobs:
            break
        now = time.perf_counter()
        if now - last_report >= 2:
            print(f"  {done}/{total} partitions proved", file=sys.stderr, flush=True)
            last_report = now
        await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - started
    rss_end = rss_bytes()
    running = False
    await monitor
    await feeding
    await server.shutdown()
    return {
        "partitions": total,
        "seconds": elapsed,
        "per_s": total / elapsed,
        "decide_p50_us": quantile([d / 1000 for d in decide_ns], 0.5),
        "decide_p99_us": quantile([d / 1000 for d in decide_ns], 0.99),
        "decide_wall_p99_us": quantile([d / 1000 for d in decide_wall_ns], 0.99),
        "decisions": len(decide_ns),
        "lag_p99_ms": quantile(lags, 0.99) * 1000,
        "lag_max_ms": max(lags) * 1000,
        "rss_growth_mib": (rss_end - (rss_warm or rss_end)) / 2**20,
    }


async def scrape_run(tmp: Path, scrapes: int = 300) -> dict[str, Any]:
    server = Server(Service.build(bench_settings(tmp / "scrape.sqlite", 8), CollectorRegistry()))
    await server.start()
    job = await server.service.submit(2000, {}, 0)
    while (
        rec := await server.service.db(server.service.journal.get_job, job.id)
    ) and rec.state != "completed":
        await asyncio.sleep(0.05)
    url = f"http://127.0.0.1:{server.port}/metrics"
    times: list[float] = []
    size = 0
    async with aiohttp.ClientSession() as session:
        for _ in range(scrapes):
            started = time.perf_counter()
            async with session.get(url) as response:
                body = await response.read()
            times.append(time.perf_counter() - started)
            size = len(body)
    await server.shutdown()
    return {
        "p50_ms": statistics.median(times) * 1000,
        "p99_ms": quantile(times, 0.99) * 1000,
        "bytes": size,
    }


async def main_async(args: argparse.Namespace) -> list[tuple[str, str, str, str]]:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        print("pipeline, all work submitted at once ...", file=sys.stderr)
        p = await pipeline_run(args.partitions, args.jobs, args.workers, tmp)
        print(f"pipeline, work arriving at {args.rate:,.0f} partitions/s ...", file=sys.stderr)
        paced = await pipeline_run(int(args.rate * 10), 500, args.workers, tmp, rate=args.rate)
        print("metrics scrapes ...", file=sys.stderr)
        s = await scrape_run(tmp)

    def verdict(ok: bool) -> str:
        return "pass" if ok else "FAIL"

    return [
        ("pipeline throughput", f"{p['per_s']:,.0f} partitions/s "
         f"({p['partitions']:,} in {p['seconds']:.1f} s)", ">= 5,000", verdict(p["per_s"] >= 5000)),
        (f"dispatch decision at {args.rate:,.0f}/s",
         f"CPU p50 {paced['decide_p50_us']:.1f} µs, p99 {paced['decide_p99_us']:.1f} µs; wall "
         f"p99 {paced['decide_wall_p99_us']:.1f} µs ({paced['decisions']:,} calls)",
         "CPU p99 < 100 µs", verdict(paced["decide_p99_us"] < 100)),
        (f"event-loop lag at {args.rate:,.0f}/s",
         f"p99 {paced['lag_p99_ms']:.2f} ms, max {paced['lag_max_ms']:.1f} ms",
         "p99 < 5 ms", verdict(paced["lag_p99_ms"] < 5)),
        ("dispatch decision, saturated", f"CPU p50 {p['decide_p50_us']:.1f} µs, p99 "
         f"{p['decide_p99_us']:.1f} µs; wall p99 {p['decide_wall_p99_us']:.1f} µs",
         "(for information)", ""),
        ("event-loop lag, saturated", f"p99 {p['lag_p99_ms']:.2f} ms, max "
         f"{p['lag_max_ms']:.1f} ms", "(for information)", ""),
        ("RSS growth", f"{p['rss_growth_mib']:.1f} MiB over the last 90% of the run",
         "< 20 MiB", verdict(p["rss_growth_mib"] < 20)),
        ("/metrics scrape, 8 GPUs", f"p50 {s['p50_ms']:.2f} ms, p99 {s['p99_ms']:.2f} ms "
         f"({s['bytes']:,} bytes)", "p99 < 10 ms", verdict(s["p99_ms"] < 10)),
    ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100_000, help="total (100000)")
    parser.add_argument("--jobs", type=int, default=100, help="jobs to split them over (100)")
    parser.add_argument("--workers", type=int, default=2, help="proving workers (2)")
    parser.add_argument(
        "--rate", type=float, default=5000.0, help="arrival rate of the paced run (5000/s)"
    )
    parser.add_argument("--markdown", action="store_true", help="Markdown table")
    args = parser.parse_args()
    rows = uvloop.run(main_async(args))
    print(render(("measure", "result", "target", ""), rows, markdown=args.markdown))
    print(
        f"\n{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores, uvloop {importlib.metadata.version('uvloop')}, workload noop, "
        f"{args.workers} proving workers"
    )
    return 0 if all(row[3] != "FAIL" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
