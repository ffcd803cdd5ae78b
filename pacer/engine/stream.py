"""An engine's connection: the WebSocket at ``/v1/engine``, its hello, then its events until
it closes or says bye."""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import WSMsgType, web

from pacer.engine.hub import (
    CLOSE_FULL,
    CLOSE_HELLO,
    CLOSE_OVERFLOW,
    CLOSE_TAKEN,
    CLOSE_VERSION,
    EngineHub,
    close_quickly,
)
from pacer.engine.protocol import ProtocolError, decode, parse_hello

log = logging.getLogger("pacer.engine")
MAX_FRAME_BYTES = 64 * 1024
HELLO_TIMEOUT_S = 10.0
HEARTBEAT_S = 10.0  # a ping this often: a peer gone without a close is noticed
CLOSE_CODES = {"version": CLOSE_VERSION, "taken": CLOSE_TAKEN, "full": CLOSE_FULL}


async def serve_engine(request: web.Request, hub: EngineHub) -> web.WebSocketResponse:
    """Serve one engine connection on ``hub`` until it closes."""
    ws = web.WebSocketResponse(max_msg_size=MAX_FRAME_BYTES, heartbeat=HEARTBEAT_S)
    await ws.prepare(request)
    try:
        first = await ws.receive(timeout=HELLO_TIMEOUT_S)
    except TimeoutError:
        await _refuse(ws, ProtocolError("hello_expected", f"no hello within {HELLO_TIMEOUT_S:g} s"))
        return ws
    if first.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
        return ws  # closed before its hello
    try:
        live = await hub.attach(parse_hello(decode(first.data)), ws)
    except ProtocolError as exc:
        await _refuse(ws, exc)
        return ws
    try:
        async for message in ws:
            if message.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                break
            if hub.sessions.get(live.id) is not live:
                break  # ended meanwhile (its send queue overflowed): drop the connection
            if not hub.received(live, message.data, time.perf_counter()):
                await hub.end(live, "bye")
                break
    finally:
        hub.detached(live, ws)
    await close_quickly(ws, CLOSE_OVERFLOW, "send_queue_overflow")  # where it is still open
    return ws


async def _refuse(ws: web.WebSocketResponse, exc: ProtocolError) -> None:
    """Tell the engine why its hello was refused, and close."""
    log.info("engine hello refused: %s", exc)
    try:
        await ws.send_json(exc.message())
        code = CLOSE_CODES.get(exc.code, CLOSE_HELLO)
        await asyncio.wait_for(ws.close(code=code, message=exc.code.encode()), 1.0)
    except (TimeoutError, ConnectionError):
        pass
