"""An engine paced through the protocol against the same engine paced in its own process, and
the decision round trip under load, on a `pacer serve` child.

    python -m bench.engine [--quick]

Scenario: the reference engine (examples/engine.py: synthesis slots and GPU workers in real
time) run twice a repeat, interleaved: advised by the session logic in its own process
(`EngineSession`, no socket) and by `pacer serve` over the protocol. Round trip: sessions
that each send events at an even pace (a partition's four events, and a ``declined`` for what
a decision advised) and time each event until the decision that acknowledges it; with 1
session and with 100 sharing the rate, with the CPU time `pacer serve` spent per event (its
/proc counters, Linux). Ends with the line the engine protocol is judged by.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.engine_transport import percentile
from bench.stats import interval
from pacer.cli.run import free_port
from pacer.cli.table import render
from pacer.config import ControllerSettings
from pacer.engine.client import EngineClient
from pacer.engine.protocol import parse_hello
from pacer.engine.session import EngineSession

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from engine import Engine, Model, Summary


class LocalAdvisor:
    """The session logic in the engine's process: the same JSON in, the same decisions out,
    with no socket between them."""

    connected = True

    def __init__(self, hello: dict[str, Any]) -> None:
        parsed = parse_hello({"type": "hello", "protocol": 1, **hello})
        self.session = EngineSession(parsed, ControllerSettings(), time.monotonic)
        self.decisions: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.seq = 0
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._send(self.session.decide())

    async def event(self, kind: str, **fields: Any) -> int:
        self.seq += 1
        self.session.take(json.dumps({"type": kind, "seq": self.seq, **fields}))
        decided = self.session.decisions
        answer = self.session.answer()
        self.decisions.put_nowait(answer)
        if self.session.decisions != decided:
            self._send(answer, queued=True)
        return self.seq

    def _send(self, decision: dict[str, Any], *, queued: bool = False) -> None:
        """Queue ``decision`` (unless it is), and decide again when it says."""
        if not queued:
            self.decisions.put_nowait(decision)
        if self._timer is not None:
            self._timer.cancel()
        if decision["next_in_s"] is not None:
            wait = max(decision["next_in_s"], 0.001)
            self._timer = asyncio.get_running_loop().call_later(
                wait, lambda: self._send(self.session.decide())
            )

    def allowance(self, inflight: int) -> int:
        return 0


async def scenario(model: Model, url: str | None, name: str) -> Summary:
    hello = model.hello(name, f"bench/{name}")
    if url is None:
        local = LocalAdvisor(hello)
        local.start()
        return await Engine(model, local).run()
    client = EngineClient(url, hello)
    await client.connect()
    try:
        return await Engine(model, client).run()
    finally:
        await client.close()


async def round_trips(url: str, sessions: int, rate: float, seconds: float) -> list[float]:
    """Round trips (s) of events sent by ``sessions`` sessions at ``rate`` events/s in all."""

    async def one(http: aiohttp.ClientSession, index: int) -> list[float]:
        ws = await http.ws_connect(url)
        hello = Model().hello(f"load-{sessions}-{index}", "bench/load")
        await ws.send_str(json.dumps({"type": "hello", "protocol": 1, **hello}))
        sent: dict[int, float] = {}
        times: list[float] = []
        seq = 0
        owed = 0

        async def send(kind: str, **fields: Any) -> None:
            nonlocal seq
            seq += 1
            sent[seq] = time.perf_counter()
            await ws.send_str(json.dumps({"type": kind, "seq": seq, **fields}))

        async def read() -> None:
            nonlocal owed
            async for message in ws:
                body = json.loads(message.data)
                if body["type"] == "decision":
                    now = time.perf_counter()
                    for acked in [s for s in sent if s <= body["ack"]]:
                        times.append(now - sent.pop(acked))
                    owed += body["dispatch"]

        reader = asyncio.ensure_future(read())
        gap = sessions / rate
        next_at = time.perf_counter() + gap * index / sessions
        end = time.perf_counter() + seconds
        partition = 0
        while time.perf_counter() < end:
            name = f"p{partition}"
            steps: list[tuple[str, dict[str, Any]]] = [
                ("dispatched", {"partition": name}),
                ("synthesis_ready", {"partition": name, "synthesis_s": 0.5}),
                ("gpu_started", {"partition": name, "worker": partition % 2}),
                ("gpu_finished", {"partition": name, "worker": partition % 2, "gpu_s": 0.05}),
            ]
            if owed:
                steps.append(("declined", {"count": owed}))
                owed = 0
            for kind, fields in steps:
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
                await send(kind, **fields)
                next_at += gap
            partition += 1
        await asyncio.sleep(0.5)
        reader.cancel()
        await ws.close()
        return times

    async with aiohttp.ClientSession() as http:
        results = await asyncio.gather(*(one(http, i) for i in range(sessions)))
    return [t for times in results for t in times]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer partitions and repeats")
    parser.add_argument("--rate", type=float, default=2000, help="events/s of the load")
    args = parser.parse_args(argv)
    repeats, partitions, seconds = (2, 60, 2.0) if args.quick else (3, 200, 5.0)
    model = Model(partitions=partitions, gpu_s=0.2)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="pacer-engine-bench-") as tmp:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("PACER_")},
               "PACER_WORKLOAD": "noop", "PACER_API__PORT": str(port),
               "PACER_JOURNAL__PATH": str(Path(tmp) / "journal.sqlite")}  # fmt: skip
        log = open(Path(tmp) / "serve.log", "wb")  # noqa: SIM115 (closed with the process)
        server = subprocess.Popen([sys.executable, "-m", "pacer", "serve"], env=env,
                                  stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            wait_ready(port)
            url = f"ws://127.0.0.1:{port}/v1/engine"
            runs: dict[str, list[Summary]] = {"in-process": [], "external": []}
            for repeat in range(repeats):
                for kind in runs:
                    where = None if kind == "in-process" else url
                    runs[kind].append(asyncio.run(scenario(model, where, f"{kind}-{repeat}")))
            loads: dict[int, list[float]] = {}
            cpu: dict[int, float] = {}
            for n in (1, 100):
                began = cpu_s(server.pid)
                loads[n] = asyncio.run(round_trips(url, n, args.rate, seconds))
                cpu[n] = (cpu_s(server.pid) - began) / max(1, len(loads[n]))
        finally:
            server.terminate()
            server.wait(60)
            log.close()
    rows = [[kind, f"{statistics.mean(s.busy for s in r):.4f}",
             f"{statistics.mean(s.mean_inflight for s in r):.2f}",
             f"{max(s.peak_inflight for s in r)}", f"{statistics.mean(s.elapsed_s for s in r):.1f}"]
            for kind, r in runs.items()]  # fmt: skip
    print(f"scenario: {partitions} partitions, 2 GPU workers at 0.2 s, 8 slots, synthesis "
          f"0.5 s (sigma 0.2), budget 32; {repeats} repeats interleaved")  # fmt: skip
    print(render(["advised", "busy", "mean in flight", "peak", "seconds"], rows))
    busy_delta = [
        e.busy - i.busy for e, i in zip(runs["external"], runs["in-process"], strict=True)
    ]
    flight = [100 * (e.mean_inflight / i.mean_inflight - 1)
              for e, i in zip(runs["external"], runs["in-process"], strict=True)]  # fmt: skip
    (busy, busy_half), (memory, memory_half) = interval(busy_delta), interval(flight)
    print(f"external - in-process: busy {busy:+.4f} ± {busy_half:.4f}, mean in flight "
          f"{memory:+.1f} ± {memory_half:.1f} % (95 %, Student's t)")  # fmt: skip
    load_rows = [[n, len(t), f"{len(t) / seconds:.0f}", f"{percentile(t, 0.5) * 1e3:.3f}",
                  f"{percentile(t, 0.99) * 1e3:.3f}", f"{cpu[n] * 1e6:.0f}"]
                 for n, t in loads.items()]  # fmt: skip
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(render(["sessions", "events", "events/s", "p50 ms", "p99 ms", "pacer CPU µs/event"],
                 load_rows))  # fmt: skip
    worst = max(percentile(t, 0.99) for t in loads.values())
    print(f"engine: round trip p99 {worst * 1e3:.2f} ms at {args.rate:.0f} events/s; external vs "
          f"in-process busy delta {statistics.mean(busy_delta):+.4f}, mean in flight delta "
          f"{statistics.mean(flight):+.1f} %")  # fmt: skip
    return 0


def cpu_s(pid: int) -> float:
    """CPU seconds (user and system) process ``pid`` has spent, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_ready(port: int, timeout_s: float = 120.0) -> None:
    from pacer.client import BlockingClient

    BlockingClient(f"http://127.0.0.1:{port}").wait_ready(timeout_s)


if __name__ == "__main__":
    raise SystemExit(main())
