"""The reference client's own logic: what it re-declares to a fresh session, how much its
fallbacks dispatch while pacer is away, and (against a real server) what a connection closed
before the welcome raises."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from pacer.engine.client import EngineClient, Fallback

HELLO = {"engine": "client-a", "workload_key": "k",
         "shape": {"gpu_workers": 2, "partition_bytes": 10, "memory_budget_bytes": 80,
                   "synthesis_slots": 4}}  # fmt: skip


class Sent(EngineClient):
    """A client whose events are kept, not sent (it is never connected)."""

    async def replay(self) -> list[dict[str, Any]]:
        await self._redeclare()
        return list(self.unacked)


def test_a_fresh_session_is_told_what_is_in_flight_in_order() -> None:
    client = Sent("ws://unused/v1/engine", HELLO)

    async def run() -> list[dict[str, Any]]:
        await client.event("backlog", partitions=10)
        for name in ("a", "b", "c", "d"):
            await client.event("dispatched", partition=name)
        await client.event("synthesis_ready", partition="b", synthesis_s=1.0)
        await client.event("synthesis_ready", partition="c", synthesis_s=1.0)
        await client.event("gpu_started", partition="c", worker=1)
        await client.event("synthesis_failed", partition="d", elapsed_s=2.0)
        client.unacked.clear()  # as a fresh session finds it: nothing acknowledged to resend
        return await client.replay()

    events = asyncio.run(run())
    assert [(e["type"], e.get("partition")) for e in events] == [
        ("dispatched", "a"),
        ("dispatched", "b"), ("synthesis_ready", "b"),
        ("dispatched", "c"), ("synthesis_ready", "c"), ("gpu_started", "c"),
        ("backlog", None),
    ]  # fmt: skip
    assert events[2]["synthesis_s"] is None  # not measured again
    assert events[5]["worker"] == 1
    assert events[-1]["partitions"] == 6  # 10, less the four dispatched


@pytest.mark.parametrize(
    ("declared", "steps", "expected"),
    [
        ({"mode": "hold"}, [(0, 0.0, 0.5), (0, 1.0, 0.5), (0, 1.25, 0.5)], [0, 2, 0]),
        ({"mode": "hold"}, [(0, 0.0, None), (0, 5.0, None)], [0, 0]),
        ({"mode": "hold"}, [(7, 0.0, 0.1), (7, 10.0, 0.1)], [0, 1]),
        ({"mode": "cap", "inflight": 3}, [(0, 0.0, None), (2, 1.0, None), (5, 2.0, None)],
         [3, 1, 0]),
    ],
    ids=["hold-rate", "hold-no-rate", "hold-within-budget", "cap"],
)  # fmt: skip
def test_the_fallback_dispatches_by_its_rule_within_the_budget(
    declared: dict[str, Any], steps: list[tuple[int, float, float | None]], expected: list[int]
) -> None:
    fallback = Fallback(declared, budget=8)
    assert [fallback.allowance(n, at, interval) for n, at, interval in steps] == expected


async def _serve_once(reply: str | None) -> tuple[web.AppRunner, int]:
    """A real server whose /v1/engine takes the hello, then answers ``reply`` (None: closes
    the connection, as a pacer stopping or starting may)."""

    async def engine(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.receive()
        if reply is not None:
            await ws.send_str(reply)
        await ws.close(code=1011)
        return ws

    app = web.Application()
    app.router.add_get("/v1/engine", engine)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert isinstance(server, asyncio.Server)
    return runner, server.sockets[0].getsockname()[1]


@pytest.mark.slow
@pytest.mark.asyncio
@pytest.mark.parametrize("reply", [None, "not json", "[1, 2]"], ids=["closed", "text", "list"])
async def test_a_connection_closed_before_the_welcome_is_one_pacer_is_away_on(
    reply: str | None,
) -> None:
    # An engine's reconnection loop expects aiohttp.ClientError while pacer is away; anything
    # else would end it, and the engine would never find the next pacer.
    runner, port = await _serve_once(reply)
    client = EngineClient(f"ws://127.0.0.1:{port}/v1/engine", HELLO)
    try:
        with pytest.raises(aiohttp.ClientConnectionError, match="no welcome from pacer"):
            await client.connect()
        assert not client.connected
    finally:
        await client.close()
        await runner.cleanup()


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_pacer_that_never_answers_the_upgrade_is_given_up_on_in_time() -> None:
    # A listener that takes the connection and answers nothing: the reconnection loop must not
    # wait on it for aiohttp's five minutes.
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up and closes
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = EngineClient(f"ws://127.0.0.1:{port}/v1/engine", HELLO)
    client.HANDSHAKE_S = 0.3
    began = asyncio.get_running_loop().time()
    try:
        with pytest.raises(TimeoutError):
            await client.connect()
        assert asyncio.get_running_loop().time() - began < 5.0
    finally:
        await client.close()
        server.close()
        await server.wait_closed()
