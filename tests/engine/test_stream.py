"""Engine sessions on a real server: the stream, a reconnection within the grace period, bad
events, a hundred sessions at once, an engine that reads too slowly, and the conformance suite
against `pacer serve` as a process."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from pacer.api.answers import ENGINES
from pacer.engine.client import EngineClient, EngineRefusedError
from pacer.engine.conformance import Suite
from pacer.engine.hub import CLOSE_OVERFLOW, EngineHub
from pacer.server import Server
from pacer.service.lifecycle import Service
from tests.servers import ServerProcess, call, fake_host, settings_for
from tests.waits import until, wait_until

pytestmark = pytest.mark.slow
GIB = 1 << 30


def hello(engine: str, key: str = "wk-stream", **shape: int) -> dict[str, Any]:
    return {"engine": engine, "workload_key": key,
            "shape": {"gpu_workers": 2, "partition_bytes": GIB, "memory_budget_bytes": 16 * GIB,
                      "synthesis_slots": 8, **shape}}  # fmt: skip


@asynccontextmanager
async def serving(tmp_path: Path, **env: str) -> AsyncIterator[Server]:
    """A started in-process `pacer serve` (noop workload) with ``env`` set."""
    roomy = fake_host(tmp_path / "host", total=2**41, available=2**40)
    settings = settings_for(tmp_path, PACER_WORKLOAD="noop", **env)
    server = Server(Service.build(settings, registry=CollectorRegistry(), host_files=roomy))
    await server.start()
    try:
        yield server
    finally:
        await server.shutdown()


def engine_url(server: Server) -> str:
    return f"ws://127.0.0.1:{server.port}/v1/engine"


def hub_of(server: Server) -> EngineHub:
    runner = server._runner
    assert runner is not None
    return runner.app[ENGINES]


async def acked(client: EngineClient, seq: int) -> dict[str, Any]:
    """The first decision that acknowledges ``seq``."""
    while True:
        decision = await asyncio.wait_for(client.decisions.get(), 60)
        if decision["ack"] >= seq:
            return decision


async def one_partition(client: EngineClient, name: str, worker: int = 0) -> int:
    await client.event("dispatched", partition=name)
    await client.event("synthesis_ready", partition=name, synthesis_s=0.5)
    await client.event("gpu_started", partition=name, worker=worker)
    return await client.event("gpu_finished", partition=name, worker=worker, gpu_s=0.05)


@pytest.mark.asyncio
async def test_events_are_answered_and_shown_in_status_and_metrics(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        client = EngineClient(engine_url(server), hello("status-a"))
        welcome = await client.connect()
        assert (welcome["resumed"], welcome["ack"]) == (False, 0)
        await client.event("backlog", partitions=20)
        assert (await acked(client, 1))["dispatch"] > 0
        seq = await one_partition(client, "p0")
        await acked(client, seq)
        _, body = await call(server, "GET", "/v1/status")
        (engine,) = body["engines"]
        assert (engine["engine"], engine["connected"], engine["ack"]) == ("status-a", True, seq)
        _, metrics = await call(server, "GET", "/metrics")
        assert f'pacer_engine_events_total{{engine="status-a"}} {seq}.0' in metrics
        assert 'pacer_engine_decision_latency_seconds_count{engine="status-a"}' in metrics
        await client.close()


@pytest.mark.asyncio
async def test_bad_events_get_errors_and_the_session_goes_on(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        client = EngineClient(engine_url(server), hello("errors-a"))
        await client.connect()
        await client.event("gpu_started", partition="ghost", worker=0)
        await client.event("dispatched", partition="p")
        await client.event("gpu_finished", partition="p", worker=0, gpu_s=1.0)
        await client.event("backlog", partitions=-3)
        seq = await client.event("backlog", partitions=3)
        await acked(client, seq)
        assert [e["code"] for e in client.errors] == [
            "unknown_partition", "wrong_state", "malformed"
        ]  # fmt: skip
        assert client.errors[2]["field"] == "partitions"
        assert client.connected
        assert hub_of(server).status()[0]["backlog"] == 3
        await client.close()


@pytest.mark.asyncio
async def test_a_reconnection_within_the_grace_resumes_and_loses_nothing(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        client = EngineClient(engine_url(server), hello("resume-a"))
        first = await client.connect()
        await client.event("backlog", partitions=10)
        await client.event("dispatched", partition="p0")
        await acked(client, 2)
        await client.drop()
        await until(lambda: not hub_of(server).status()[0]["connected"], "the disconnection")
        await client.event("synthesis_ready", partition="p0", synthesis_s=2.0)  # while away
        assert client.allowance(inflight=1) == 0  # hold: one interval has not passed yet
        welcome = await client.connect()
        assert (welcome["resumed"], welcome["session"], welcome["ack"]) == (
            True, first["session"], 2
        )  # fmt: skip
        await acked(client, 3)
        (state,) = hub_of(server).status()
        assert (state["ready"], state["backlog"], client.errors) == (1, 9, [])
        await client.close()


@pytest.mark.asyncio
async def test_a_session_ends_after_its_grace_and_warms_the_next(tmp_path: Path) -> None:
    async with serving(tmp_path, PACER_ENGINE__GRACE_S="0.2") as server:
        client = EngineClient(engine_url(server), hello("grace-a", key="wk-grace"))
        await client.connect()
        for i in range(4):
            seq = await one_partition(client, f"p{i}", worker=i % 2)
        await acked(client, seq)
        await client.drop()
        hub = hub_of(server)
        await until(lambda: not hub.sessions, "the session to end after its grace")
        saved = json.loads(hub.store.path.read_text()) if hub.store.path else {}
        assert saved["wk-grace"]["gpu_service_s"] == pytest.approx(0.05)
        again = EngineClient(engine_url(server), hello("grace-b", key="wk-grace"))
        assert (await again.connect())["warm"] is True
        late = await client.connect()  # the first engine's session is gone: a fresh one
        assert (late["resumed"], late["ack"]) == (False, 0)
        await again.close()
        await client.close()


@pytest.mark.asyncio
async def test_a_hundred_sessions_at_once(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        clients = [EngineClient(engine_url(server), hello(f"many-{i:03d}")) for i in range(100)]
        await asyncio.gather(*(c.connect() for c in clients))

        async def work(client: EngineClient) -> dict[str, Any]:
            await client.event("backlog", partitions=50)
            for i in range(3):
                seq = await one_partition(client, f"p{i}", worker=i % 2)
            return await acked(client, seq)

        decisions = await asyncio.gather(*(work(c) for c in clients))
        assert all(d["ack"] == 13 for d in decisions)
        assert len(hub_of(server).status()) == 100
        status, _ = await call(server, "GET", "/v1/status")  # sessions are not reads
        assert status == 200
        _, metrics = await call(server, "GET", "/metrics")
        assert 'pacer_engine_sessions{state="connected"} 100.0' in metrics
        await asyncio.gather(*(c.close() for c in clients))
        await until(lambda: not hub_of(server).sessions, "every session to end")


def masked_frame(message: dict[str, Any]) -> bytes:
    """One client-to-server WebSocket text frame (masked, as a client must)."""
    payload = json.dumps(message).encode()
    mask = os.urandom(4)
    size = len(payload)
    head = (struct.pack("!BB", 0x81, 0x80 | size) if size < 126
            else struct.pack("!BBH", 0x81, 0x80 | 126, size))  # fmt: skip
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def slow_engine(port: int, engine: str, events: int) -> None:
    """An engine that never reads: a raw socket with a small receive buffer, its hello, then
    ``events`` events, all framed beforehand and written at once (blocking; run on a
    thread)."""
    frames = [{"type": "hello", "protocol": 1, **hello(engine)}]
    frames += [{"type": "backlog", "seq": n, "partitions": n} for n in range(1, events + 1)]
    stream = b"".join(masked_frame(frame) for frame in frames)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(f"GET /v1/engine HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                 f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                 "Sec-WebSocket-Version: 13\r\n\r\n".encode())  # fmt: skip
    try:
        sock.sendall(stream)
    except OSError:
        pass  # pacer dropped it: what this engine is for
    finally:
        sock.close()


@pytest.mark.asyncio
async def test_a_slow_engine_is_dropped_and_others_go_on(tmp_path: Path) -> None:
    async with serving(tmp_path, PACER_ENGINE__SEND_QUEUE="8") as server:
        client = EngineClient(engine_url(server), hello("fast-a"))
        await client.connect()
        hub = hub_of(server)
        port = server.port
        assert port is not None
        slow = asyncio.ensure_future(asyncio.to_thread(slow_engine, port, "slow-a", 50_000))
        for i in range(20):  # the fast engine is answered while the slow one floods
            await acked(client, await client.event("backlog", partitions=i + 1))
        await until(
            lambda: call(server, "GET", "/metrics"), "the slow session to be dropped",
            done=lambda answer: 'reason="send_queue_overflow"} 1.0' in answer[1],
        )  # fmt: skip
        await slow
        assert [s["engine"] for s in hub.status()] == ["fast-a"]
        assert client.connected
        assert client.errors == []
        await client.close()
    assert CLOSE_OVERFLOW == 4008


def test_the_conformance_suite_passes_against_pacer_serve(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, PACER_WORKLOAD="noop").start()
    try:
        url = f"ws://127.0.0.1:{server.port}/v1/engine"
        lines: list[str] = []
        results = asyncio.run(Suite(url, None, "suite").run(lines.append))
        assert all(result is None for result in results.values()), "\n".join(lines)
        assert len(results) == len(Suite.RULES)
    finally:
        server.stop()


def test_engines_are_served_on_the_unix_socket(tmp_path: Path) -> None:
    path = tmp_path / "engines.sock"
    server = ServerProcess(tmp_path, PACER_WORKLOAD="noop", PACER_ENGINE__SOCKET=str(path))
    server.start()
    try:
        wait_until(path.is_socket, "the Unix socket")

        async def session() -> dict[str, Any]:
            client = EngineClient("ws://localhost/v1/engine", hello("unix-a"),
                                  unix_socket=str(path))  # fmt: skip
            await client.connect()
            await client.event("backlog", partitions=5)
            decision = await acked(client, 1)
            await client.close()
            return decision

        assert asyncio.run(session())["dispatch"] > 0
    finally:
        server.stop()


@pytest.mark.asyncio
async def test_a_session_needs_the_token_and_a_free_place(tmp_path: Path) -> None:
    token = "engine-token-0123456789"
    env = {"PACER_API__TOKEN": token, "PACER_ENGINE__MAX_SESSIONS": "1"}
    async with serving(tmp_path, **env) as server:
        anonymous = EngineClient(engine_url(server), hello("token-a"))
        first = EngineClient(engine_url(server), hello("token-a"), token=token)
        second = EngineClient(engine_url(server), hello("token-b"), token=token)
        try:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await anonymous.connect()
            assert refused.value.status == 401
            await first.connect()
            with pytest.raises(EngineRefusedError) as full:
                await second.connect()
            assert full.value.error["code"] == "full"
        finally:
            for client in (anonymous, first, second):
                await client.close()
