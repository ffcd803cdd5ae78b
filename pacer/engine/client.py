"""A reference client of the engine protocol, for an engine written in Python.

It speaks only the JSON of docs/engine-protocol.md and imports nothing of pacer (aiohttp and
the standard library only), so it can be copied into an engine as it is. It numbers events,
keeps those pacer has not acknowledged and sends them again after a reconnection, resumes its
session with its token, and paces by its declared fallback while pacer is away.

    client = EngineClient("ws://127.0.0.1:9470/v1/engine", hello)
    await client.connect()
    await client.event("backlog", partitions=100)
    decision = await client.decisions.get()  # {"type": "decision", "dispatch": k, ...}
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections import deque
from typing import Any

import aiohttp

PROTOCOL_VERSION = 1
# The state each event puts a partition in, as a fresh session needs it re-declared.
TRACKED = {"dispatched": "synthesizing", "synthesis_ready": "ready", "gpu_started": "gpu"}


def _json_object(text: str) -> dict[str, Any] | None:
    """``text`` as a JSON object; None where it is no JSON, or another JSON value."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class EngineRefusedError(Exception):
    """pacer refused the hello: ``error`` is its error message (code, message, field)."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.error = error


class Fallback:
    """What the engine may dispatch while pacer is away. ``hold``: the last decided rate, one
    partition per ``interval_s`` of the last decision; ``cap``: up to ``inflight`` partitions
    in flight. Never past ``budget`` partitions in flight (memory budget ÷ partition bytes).

    >>> f = Fallback({"mode": "hold"}, budget=8)
    >>> f.allowance(inflight=2, now=0.0, interval_s=0.5), f.allowance(2, 1.0, 0.5)
    (0, 2)
    >>> Fallback({"mode": "cap", "inflight": 4}, budget=8).allowance(1, 0.0, None)
    3
    """

    def __init__(self, declared: dict[str, Any], budget: int) -> None:
        self.mode = declared.get("mode", "hold")
        self.cap = int(declared.get("inflight", budget))
        self.budget = budget
        self._credit = 0.0
        self._last: float | None = None

    def allowance(self, inflight: int, now: float, interval_s: float | None) -> int:
        """Partitions to dispatch now, given ``inflight`` and the last decision's interval."""
        room = max(0, self.budget - inflight)
        if self.mode == "cap":
            return min(room, max(0, self.cap - inflight))
        last, self._last = self._last, now
        if last is None or not interval_s or interval_s <= 0 or math.isinf(interval_s):
            return 0  # no rate to hold yet: nothing is dispatched until one is known
        self._credit = min(self._credit + (now - last) / interval_s, float(max(1, room)))
        count = min(room, int(self._credit))
        self._credit -= count
        return count


class EngineClient:
    """One engine's session with pacer at ``url`` (``ws://host:port/v1/engine``; with
    ``unix_socket``, the URL's host is ignored and the socket is used). ``hello`` is the hello
    message without ``type``, ``protocol`` and ``resume``, which the client adds."""

    HANDSHAKE_S = 10.0  # the upgrade answered, and then the welcome, each within this

    def __init__(
        self,
        url: str,
        hello: dict[str, Any],
        *,
        token: str | None = None,
        unix_socket: str | None = None,
    ) -> None:
        self.url = url
        self.hello = hello
        self._headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        self._unix_socket = unix_socket
        self.session_id: str | None = None
        self.token: str | None = None
        self.seq = 0
        self.unacked: deque[dict[str, Any]] = deque()
        self.decisions: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.errors: list[dict[str, Any]] = []
        self.last_decision: dict[str, Any] | None = None
        self.closed_with: tuple[int | None, str] | None = None  # pacer's close code, reason
        shape = hello["shape"]
        budget = max(1, shape["memory_budget_bytes"] // shape["partition_bytes"])
        self.fallback = Fallback(hello.get("fallback", {"mode": "hold"}), budget)
        self.inflight: dict[str, tuple[str, int | None]] = {}  # partition: (state, worker)
        self.backlog = 0  # as the events sent say: the last backlog, less those dispatched
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None

    @property
    def connected(self) -> bool:
        return self._ws is not None and not self._ws.closed

    async def connect(self) -> dict[str, Any]:
        """Open (or resume) the session; the welcome. Events not acknowledged are sent again.
        EngineRefusedError where pacer refuses the hello; aiohttp.ClientError where it is away,
        or closes the connection (or answers no JSON object) before its welcome; TimeoutError
        where the upgrade or the welcome takes longer than ``HANDSHAKE_S``."""
        if self._http is None:
            connector = aiohttp.UnixConnector(self._unix_socket) if self._unix_socket else None
            self._http = aiohttp.ClientSession(connector=connector)
        ws = await asyncio.wait_for(
            self._http.ws_connect(self.url, headers=self._headers, heartbeat=10.0),
            self.HANDSHAKE_S,
        )
        hello = {"type": "hello", "protocol": PROTOCOL_VERSION, **self.hello}
        if self.session_id is not None:
            hello["resume"] = {"session": self.session_id, "token": self.token}
        await ws.send_str(json.dumps(hello))
        reply = await ws.receive(timeout=self.HANDSHAKE_S)
        welcome = _json_object(reply.data) if reply.type is aiohttp.WSMsgType.TEXT else None
        if welcome is None:  # closed before its welcome (pacer stopping or starting), or no JSON
            await ws.close()
            raise aiohttp.ClientConnectionError(
                f"no welcome from pacer: {reply.type.name} {reply.data!r}"
            )
        if welcome.get("type") != "welcome":
            await ws.close()
            raise EngineRefusedError(welcome)
        fresh = not welcome["resumed"]
        if fresh:
            self.seq = welcome["ack"]  # a fresh session: numbering begins again
            self.unacked.clear()
        self.session_id, self.token = welcome["session"], welcome["token"]
        self._trim(welcome["ack"])
        self._ws = ws
        self.closed_with = None
        for event in list(self.unacked):
            await ws.send_str(json.dumps(event))
        self._reader = asyncio.ensure_future(self._read(ws))
        if fresh and (self.inflight or self.backlog):
            await self._redeclare()
        return dict(welcome)

    async def _redeclare(self) -> None:
        """Tell a fresh session what is in flight (the spec's order) and the backlog."""
        backlog = self.backlog
        for partition, (state, worker) in list(self.inflight.items()):
            await self.event("dispatched", partition=partition)
            if state in ("ready", "gpu"):
                await self.event("synthesis_ready", partition=partition, synthesis_s=None)
            if state == "gpu":
                await self.event("gpu_started", partition=partition, worker=worker)
        await self.event("backlog", partitions=backlog)

    async def event(self, kind: str, **fields: Any) -> int:
        """Send one event (kept until acknowledged); its seq. Sent on reconnection where pacer
        is away now."""
        self.seq += 1
        event = {"type": kind, "seq": self.seq, **fields}
        self._track(kind, fields)
        self.unacked.append(event)
        if self.connected:
            assert self._ws is not None
            with contextlib.suppress(ConnectionError):
                await self._ws.send_str(json.dumps(event))
        return self.seq

    def _track(self, kind: str, fields: dict[str, Any]) -> None:
        """Follow what the events say is in flight, to re-declare it to a fresh session."""
        partition = fields.get("partition")
        if kind in TRACKED and isinstance(partition, str):
            self.inflight[partition] = (TRACKED[kind], fields.get("worker"))
            if kind == "dispatched":
                self.backlog = max(0, self.backlog - 1)
        elif kind in ("synthesis_failed", "gpu_finished", "dropped"):
            self.inflight.pop(str(partition), None)
        elif kind == "backlog":
            self.backlog = int(fields["partitions"])

    def _trim(self, ack: int) -> None:
        while self.unacked and self.unacked[0]["seq"] <= ack:
            self.unacked.popleft()

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for message in ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            body = json.loads(message.data)
            if body.get("type") == "decision":
                self._trim(body["ack"])
                self.last_decision = body
                self.decisions.put_nowait(body)
            elif body.get("type") == "error":
                self.errors.append(body)
        self.closed_with = (ws.close_code, str(ws.exception() or ""))

    def allowance(self, inflight: int) -> int:
        """While pacer is away: partitions the declared fallback lets the engine dispatch."""
        interval = None if self.last_decision is None else self.last_decision["interval_s"]
        return self.fallback.allowance(inflight, time.monotonic(), interval)

    async def wait_closed(self) -> None:
        """Until pacer closes the connection (or it breaks)."""
        if self._reader is not None:
            await asyncio.shield(self._reader)

    async def drop(self) -> None:
        """Close the connection without ending the session (pacer keeps it for its grace)."""
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await self._reader

    async def close(self, *, bye: bool = True) -> None:
        """End the session (``bye``) and close the connection and the HTTP session."""
        if bye and self.connected:
            await self.event("bye")
        await self.drop()
        if self._http is not None:
            await self._http.close()
            self._http = None
