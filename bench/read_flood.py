"""Writes under a read flood: a real `pacer serve`, ``--readers`` tasks looping on GET (no
token), and authorised POSTs timed beside them.

    .venv/bin/python -m bench.read_flood [--readers 64] [--posts 40] [--repeats 3]

Each run starts a fresh `pacer serve` (noop workload, a token set) with one value of
``PACER_API__MAX_READS`` (``--limits``, 0: no limit), seeds a few jobs, starts the readers
(each loops over GET /v1/status, /v1/jobs, /v1/jobs/{id}, /v1/jobs/{id}/partitions), then:

- sends ``--posts`` POST /v1/jobs one after another, ``--gap-s`` apart, each timed from
  request to answer (a timeout at ``--timeout-s`` counts as that long, and as timed out);
- submits one job of ``--big`` partitions and times it until it has completed (polled with
  the token, through the same flood);
- counts the readers' answers: 200s and 503s a second.

Runs alternate between the limits (A B A B ...) ``--repeats`` times; the table gives each
run's figures and each limit's median. A limit ``old`` runs the tree at ``--old-root`` (another
checkout, such as one from before reads were bounded) with no limit set.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from bench.soak import free_port, wait_ready
from pacer.cli.table import render

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "b" * 40
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


@dataclass
class Run:
    limit: str
    post_s: list[float] = field(default_factory=list)
    timed_out: int = 0
    reads_ok: int = 0
    reads_refused: int = 0
    read_s: float = 0.0
    big_job_s: float = 0.0

    def row(self) -> list[str]:
        p50 = statistics.median(self.post_s)
        p99 = quantile(self.post_s, 0.99)
        return [
            {"0": "0 (none)", "old": "old tree"}.get(self.limit, self.limit),
            f"{p50 * 1000:.0f}",
            f"{p99 * 1000:.0f}",
            f"{max(self.post_s) * 1000:.0f}",
            str(self.timed_out),
            f"{self.reads_ok / self.read_s:.0f}",
            f"{self.reads_refused / self.read_s:.0f}",
            f"{self.big_job_s:.2f}",
        ]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Served:
    """`pacer serve` in a child process, its journal in ``tmp``."""

    def __init__(self, tmp: Path, limit: str, old_root: Path | None) -> None:
        root = ROOT
        if limit == "old":
            if old_root is None:
                raise SystemExit("--limits old needs --old-root")
            root = old_root
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "PACER_WORKLOAD": "noop",
            "PACER_VERIFY_EVERY": "0",
            "PACER_JOURNAL__PATH": str(tmp / "journal.sqlite"),
            "PACER_API__PORT": str(self.port),
            "PACER_API__TOKEN": TOKEN,
            "PYTHONPATH": str(root),
        }
        if limit != "old":
            env["PACER_API__MAX_READS"] = limit
        self.log_path = tmp / "serve.log"
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        argv = [sys.executable, "-m", "pacer", "serve"]
        self.proc = subprocess.Popen(
            argv, env=env, cwd=root, stdout=self.log, stderr=subprocess.STDOUT
        )

    async def ready(self, session: aiohttp.ClientSession) -> None:
        await wait_ready(session, self.base, self.proc, self.log_path)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


async def post_job(session: aiohttp.ClientSession, base: str, partitions: int,
                   timeout_s: float) -> tuple[float, str | None]:  # fmt: skip
    """(seconds to the answer, the job's id or None)."""
    began = time.perf_counter()
    try:
        async with session.post(base + "/v1/jobs", json={"partitions": partitions}, headers=AUTH,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:  # fmt: skip
            body = await r.json(content_type=None)
            ok = r.status in (200, 202)
            return time.perf_counter() - began, str(body["id"]) if ok else None
    except TimeoutError:
        return timeout_s, None


async def reader(session: aiohttp.ClientSession, paths: list[str], run: Run,
                 stop: asyncio.Event) -> None:  # fmt: skip
    for path in itertools.cycle(paths):
        if stop.is_set():
            return
        try:
            async with session.get(path) as response:
                await response.read()
                if response.status == 200:
                    run.reads_ok += 1
                elif response.status == 503:
                    run.reads_refused += 1
                    # As a client honouring Retry-After would; the flood keeps its other tasks.
                    await asyncio.sleep(float(response.headers.get("Retry-After", "0")))
        except aiohttp.ClientError:
            await asyncio.sleep(0.01)


async def wait_completed(session: aiohttp.ClientSession, base: str, job_id: str) -> None:
    while True:
        async with session.get(f"{base}/v1/jobs/{job_id}", headers=AUTH) as response:
            if response.status == 200 and (await response.json())["state"] == "completed":
                return
        await asyncio.sleep(0.05)


async def one_run(args: argparse.Namespace, limit: str) -> Run:
    run = Run(limit)
    with tempfile.TemporaryDirectory(prefix="pacer-flood-") as tmp:
        served = Served(Path(tmp), limit, args.old_root)
        try:
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector) as session:
                await served.ready(session)
                base = served.base
                seeded = [await post_job(session, base, 1000, 30) for _ in range(5)]
                job = next(job_id for _, job_id in seeded if job_id)
                paths = [f"{base}/v1/status", f"{base}/v1/jobs", f"{base}/v1/jobs/{job}",
                         f"{base}/v1/jobs/{job}/partitions?limit=1000"]  # fmt: skip
                stop = asyncio.Event()
                readers = [asyncio.create_task(reader(session, paths[i % 4:] + paths[:i % 4],
                                                      run, stop))
                           for i in range(args.readers)]  # fmt: skip
                await asyncio.sleep(1.0)  # the flood under way
                read_began, ok0, refused0 = time.perf_counter(), run.reads_ok, run.reads_refused
                for _ in range(args.posts):
                    seconds, job_id = await post_job(session, base, 10, args.timeout_s)
                    run.post_s.append(seconds)
                    run.timed_out += job_id is None
                    await asyncio.sleep(args.gap_s)
                began = time.perf_counter()
                _, big = await post_job(session, base, args.big, 60)
                if big is not None:
                    await wait_completed(session, base, big)
                run.big_job_s = time.perf_counter() - began
                run.read_s = time.perf_counter() - read_began
                run.reads_ok -= ok0
                run.reads_refused -= refused0
                stop.set()
                await asyncio.gather(*readers)
        finally:
            served.stop()
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readers", type=int, default=64)
    parser.add_argument("--posts", type=int, default=40)
    parser.add_argument("--gap-s", type=float, default=0.1)
    parser.add_argument("--timeout-s", type=float, default=10.0)
    parser.add_argument("--big", type=int, default=2000, help="partitions of the timed job")
    parser.add_argument(
        "--limits",
        default="0,16",
        help="PACER_API__MAX_READS values, A,B,...; old: the --old-root tree",
    )
    parser.add_argument("--old-root", type=Path, help="another checkout, for --limits old")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = parser.parse_args()
    limits = args.limits.split(",")
    runs = []
    for _ in range(args.repeats):
        for limit in limits:
            runs.append(asyncio.run(one_run(args, limit)))
            print(" ".join(runs[-1].row()), file=sys.stderr, flush=True)
    header = ["max_reads", "POST p50 (ms)", "POST p99 (ms)", "POST max (ms)", "timed out",
              "reads 200/s", "reads 503/s", f"{args.big}-partition job (s)"]  # fmt: skip
    rows = [run.row() for run in runs]
    for limit in limits:
        mine = [r for r in runs if r.limit == limit]
        p99s = [quantile(r.post_s, 0.99) * 1000 for r in mine]
        big = [r.big_job_s for r in mine]
        rows.append([f"median, {limit}", "", f"{statistics.median(p99s):.0f}", "", "",
                     "", "", f"{statistics.median(big):.2f}"])  # fmt: skip
    print(f"{args.readers} readers, {args.posts} POSTs {args.gap_s:g} s apart, timeout "
          f"{args.timeout_s:g} s; runs in the order made")  # fmt: skip
    print(render(header, rows, markdown=args.markdown))


if __name__ == "__main__":
    main()
