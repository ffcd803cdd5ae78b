"""Connections that stall: a late request head, a body that never arrives, an idle keep-alive.
A real server on a real socket, with timeouts of a fraction of a second."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from pacer.server import Server
from pacer.service.lifecycle import Service
from tests.api.raw_http import build, closed_within, exchange
from tests.servers import settings_for
from tests.tiers import starts_something

pytestmark = pytest.mark.asyncio
TIMEOUT_S = 0.2


@pytest_asyncio.fixture
@starts_something
async def quick(tmp_path: Path) -> AsyncIterator[Server]:
    """A service whose head and body timeouts are TIMEOUT_S; idle connections live 5 s."""
    settings = settings_for(
        tmp_path, PACER_API__HEADER_TIMEOUT_S=str(TIMEOUT_S),
        PACER_API__BODY_TIMEOUT_S=str(TIMEOUT_S), PACER_API__KEEPALIVE_TIMEOUT_S="5",
    )  # fmt: skip
    svc = Server(Service.build(settings, registry=CollectorRegistry()))
    await svc.start()
    yield svc
    await svc.shutdown()


async def connect(server: Server) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    assert server.port is not None
    return await asyncio.open_connection("127.0.0.1", server.port)


def refused(server: Server, reason: str) -> float | None:
    return server.service.registry.get_sample_value("pacer_api_refusals_total", {"reason": reason})


async def test_a_stalled_half_head_is_closed_while_healthz_answers(quick: Server) -> None:
    reader, writer = await connect(quick)
    started = time.monotonic()
    writer.write(b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
    assert quick.port is not None
    healthz = await exchange(quick.port, build("GET", "/healthz"), timeout_s=1.0)
    assert (healthz.status, json.loads(healthz.body)) == (200, {"status": "alive"})
    assert await closed_within(reader, 2.0) == b""
    assert time.monotonic() - started >= TIMEOUT_S * 0.9
    assert refused(quick, "head_timeout") == 1
    writer.close()


async def test_a_head_dripped_a_byte_at_a_time_is_cut_at_the_deadline(quick: Server) -> None:
    reader, writer = await connect(quick)
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " + b"x" * 400  # 9 s or more
    with pytest.raises(ConnectionError):  # closed before the drip ended: at the deadline
        await drip(reader, writer, head)
    assert await closed_within(reader, 1.0) == b""
    assert refused(quick, "head_timeout") == 1
    writer.close()


async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes) -> None:
    """Send ``data`` a byte every 20 ms; ConnectionError once the server has closed."""
    for byte in data:
        if reader.at_eof():
            raise ConnectionError("closed by the server")
        writer.write(bytes([byte]))
        await writer.drain()
        await asyncio.sleep(0.02)


async def test_a_connection_that_sends_nothing_is_closed(quick: Server) -> None:
    reader, writer = await connect(quick)
    started = time.monotonic()
    assert await closed_within(reader, 2.0) == b""
    assert time.monotonic() - started < 4.0  # the head's deadline, not the keep-alive's 5 s
    assert refused(quick, "head_timeout") == 1
    writer.close()


async def test_a_head_in_two_pieces_within_the_deadline_is_served(quick: Server) -> None:
    reader, writer = await connect(quick)
    request = build("GET", "/healthz")
    writer.write(request[:10])
    await asyncio.sleep(TIMEOUT_S / 4)
    writer.write(request[10:])
    answer = await closed_within(reader, 2.0)
    assert answer.startswith(b"HTTP/1.1 200 OK")
    writer.close()


async def test_the_deadline_covers_each_head_not_the_idle_time_between_requests(
    quick: Server,
) -> None:
    reader, writer = await connect(quick)
    keep_alive = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    for _ in range(2):
        writer.write(keep_alive)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 1.0)
        assert head.startswith(b"HTTP/1.1 200 OK")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        await asyncio.sleep(TIMEOUT_S * 2)  # idle, under the keep-alive timeout
    writer.close()


async def test_a_body_that_never_arrives_gets_408_and_the_connection_closes(
    quick: Server,
) -> None:
    reader, writer = await connect(quick)
    head = build("POST", "/v1/jobs", b"", {"Content-Type": "application/json",
                                         "Content-Length": "100"})  # fmt: skip
    writer.write(head + b'{"partitions": ')
    answer = await closed_within(reader, 2.0)
    assert answer.startswith(b"HTTP/1.1 408")
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["error"] == f"request body not received within {TIMEOUT_S:g} s " + (
        "(PACER_API__BODY_TIMEOUT_S)"
    )
    assert refused(quick, "body_timeout") == 1
    assert await quick.service.db(quick.service.journal.list_jobs) == []
    writer.close()


@pytest.mark.slow
async def test_an_idle_keep_alive_connection_is_closed(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, PACER_API__KEEPALIVE_TIMEOUT_S=str(TIMEOUT_S))
    svc = Server(Service.build(settings, registry=CollectorRegistry()))
    await svc.start()
    try:
        reader, writer = await connect(svc)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 1.0)
        assert head.startswith(b"HTTP/1.1 200 OK")
        started = time.monotonic()
        await closed_within(reader, 3.0)
        assert time.monotonic() - started >= TIMEOUT_S * 0.9
        writer.close()
    finally:
        await svc.shutdown()
