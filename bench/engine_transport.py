"""The engine protocol's transport: the round trip of one event and its decision, over
WebSocket/JSON on TCP, WebSocket/JSON on a Unix socket, and a gRPC bidirectional stream.

    python -m bench.engine_transport [--events 5000] [--repeats 3]

Each server is a child process that answers every event frame with a decision frame of the
engine protocol's size (the same JSON work on every transport: gRPC carries the same bytes, so
only the transport differs). The client sends one event, waits for its decision, and repeats
(a closed loop: the round trip itself). Transports run interleaved (A B C A B C ...), each
``--repeats`` times; the table has the median of each run's p50 and p99 and the 95 % interval
of the runs' p99. gRPC needs ``grpcio`` (not a dependency of pacer); without it, its rows are
left out.
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

from bench.stats import interval
from pacer.cli.run import free_port
from pacer.cli.table import render

EVENT = {
    "type": "gpu_finished",
    "seq": 1,
    "partition": "job-0001/p-000017",
    "worker": 1,
    "gpu_s": 1.8125,
}
DECISION = {
    "type": "decision",
    "dispatch": 1,
    "ack": 1,
    "next_in_s": 0.4375,
    "interval_s": 0.9,
    "mode": "pacing",
}
TRANSPORTS = ("ws-tcp", "ws-unix", "grpc-tcp")


def answer(frame: str | bytes) -> str:
    """The decision for one event frame: parsed, answered, written as JSON."""
    event = json.loads(frame)
    return json.dumps({**DECISION, "ack": event["seq"]}, separators=(",", ":"))


async def serve_ws(where: str) -> None:
    from aiohttp import WSMsgType, web

    async def session(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:
            if message.type != WSMsgType.TEXT:
                break
            await ws.send_str(answer(message.data))
        return ws

    app = web.Application()
    app.router.add_get("/v1/engine", session)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    if where.startswith("/"):
        await web.UnixSite(runner, where).start()
    else:
        await web.TCPSite(runner, "127.0.0.1", int(where)).start()
    print("serving", flush=True)
    await asyncio.Event().wait()


async def serve_grpc(port: str) -> None:
    import grpc
    from grpc import aio

    async def session(requests, context):  # type: ignore[no-untyped-def]
        async for raw in requests:
            yield answer(raw).encode()

    handler = grpc.method_handlers_generic_handler(
        "pacer.Engine", {"Session": grpc.stream_stream_rpc_method_handler(session)}
    )
    server = aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("serving", flush=True)
    await server.wait_for_termination()


async def round_trips_ws(where: str, count: int) -> list[float]:
    import aiohttp

    connector = aiohttp.UnixConnector(where) if where.startswith("/") else None
    host = "localhost" if where.startswith("/") else f"127.0.0.1:{where}"
    async with (
        aiohttp.ClientSession(connector=connector) as http,
        http.ws_connect(f"ws://{host}/v1/engine") as ws,
    ):
        times = []
        for seq in range(1, count + 1):
            began = time.perf_counter()
            await ws.send_str(json.dumps({**EVENT, "seq": seq}))
            await ws.receive()
            times.append(time.perf_counter() - began)
        return times


async def round_trips_grpc(port: str, count: int) -> list[float]:
    from grpc import aio

    async with aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.stream_stream("/pacer.Engine/Session")()
        times = []
        for seq in range(1, count + 1):
            began = time.perf_counter()
            await call.write(json.dumps({**EVENT, "seq": seq}).encode())
            await call.read()
            times.append(time.perf_counter() - began)
        await call.done_writing()
        return times


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def measure(transport: str, count: int, folder: Path) -> list[float]:
    """Round trips (s) of ``count`` events to a fresh server of ``transport``."""

    where = str(folder / "engine.sock") if transport == "ws-unix" else str(free_port())
    kind = "grpc" if transport.startswith("grpc") else "ws"
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.engine_transport", "--serve", kind, "--where", where],
        stdout=subprocess.PIPE,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == b"serving"
        client = round_trips_grpc if kind == "grpc" else round_trips_ws
        times: list[float] = _run(client(where, count + count // 10), uvloop_ok=kind == "ws")
        return times[count // 10 :]  # the first tenth warms the connection up
    finally:
        server.kill()
        server.wait()
        Path(where).unlink(missing_ok=True) if where.startswith("/") else None


def _run(coro, *, uvloop_ok: bool):  # type: ignore[no-untyped-def]
    if uvloop_ok:
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=5000, help="round trips a run (events)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each transport")
    parser.add_argument("--serve", choices=("ws", "grpc"), help=argparse.SUPPRESS)
    parser.add_argument("--where", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve = serve_grpc(args.where) if args.serve == "grpc" else serve_ws(args.where)
        _run(serve, uvloop_ok=args.serve == "ws")
        return 0
    try:
        import grpc  # noqa: F401
    except ImportError:
        transports: tuple[str, ...] = TRANSPORTS[:2]
        print("grpcio is not installed: gRPC left out", file=sys.stderr)
    else:
        transports = TRANSPORTS
    runs: dict[str, list[tuple[float, float, float]]] = {t: [] for t in transports}
    with tempfile.TemporaryDirectory(prefix="pacer-transport-") as tmp:
        for _ in range(args.repeats):
            for transport in transports:
                times = measure(transport, args.events, Path(tmp))
                runs[transport].append(
                    (percentile(times, 0.5), percentile(times, 0.99), len(times) / sum(times))
                )
    rows = []
    for transport, results in runs.items():
        p99s = [r[1] for r in results]
        _, spread = interval(p99s)
        rows.append(
            [
                transport,
                f"{statistics.median(r[0] for r in results) * 1e3:.3f}",
                f"{statistics.median(p99s) * 1e3:.3f}",
                f"± {spread * 1e3:.3f}",
                f"{statistics.median(r[2] for r in results):.0f}",
            ]
        )
    print(
        f"{args.events} round trips a run, {args.repeats} runs each, interleaved; "
        f"{os.cpu_count()} cores"
    )
    print(render(["transport", "p50 ms", "p99 ms", "p99 95% ±", "round trips/s"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
