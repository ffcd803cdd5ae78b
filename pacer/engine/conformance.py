"""The engine protocol's conformance suite: each rule of docs/engine-protocol.md checked
against a live server, one line PASS or FAIL each.

    python -m pacer.engine.conformance --url ws://127.0.0.1:9470/v1/engine [--token T]

It speaks raw JSON over aiohttp (no pacer import), so it checks any server of the protocol.
Exit status 0 when every rule passes, 1 otherwise. Each rule opens sessions of its own, named
``<prefix>-<rule>``: run it beside other engines without meeting them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

TIMEOUT_S = 10.0
SHAPE = {
    "gpu_workers": 2,
    "partition_bytes": 1 << 30,
    "memory_budget_bytes": 8 << 30,
    "synthesis_slots": 4,
}


class RuleFailedError(AssertionError):
    """A rule does not hold: what was expected and what came."""


class Conn:
    """One WebSocket to the server, with the messages it answered."""

    def __init__(self, http: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse):
        self.http = http
        self.ws = ws
        self.seq = 0

    async def send(self, message: dict[str, Any] | str) -> None:
        await self.ws.send_str(message if isinstance(message, str) else json.dumps(message))

    async def event(self, kind: str, **fields: Any) -> None:
        self.seq += 1
        await self.send({"type": kind, "seq": self.seq, **fields})

    async def next(self, kind: str | None = None) -> dict[str, Any]:
        """The next message (of ``kind``, skipping others); RuleFailedError on a close or a
        timeout."""
        while True:
            message = await self.ws.receive(timeout=TIMEOUT_S)
            if message.type != aiohttp.WSMsgType.TEXT:
                raise RuleFailedError(
                    f"expected {kind or 'a message'}, the connection closed ({self.ws.close_code})"
                )
            body = dict(json.loads(message.data))
            if kind is None or body.get("type") == kind:
                return body

    async def closed(self) -> int | None:
        """Read until the server closes; its close code."""
        while not self.ws.closed:
            message = await self.ws.receive(timeout=TIMEOUT_S)
            if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                break
        return self.ws.close_code


class Suite:
    """The rules, each a coroutine that raises RuleFailedError."""

    def __init__(self, url: str, token: str | None, prefix: str) -> None:
        self.url = url
        self.headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        self.prefix = prefix

    async def connect(self, http: aiohttp.ClientSession) -> Conn:
        return Conn(http, await http.ws_connect(self.url, headers=self.headers))

    def hello(self, name: str, **fields: Any) -> dict[str, Any]:
        """A hello of protocol 1 from the engine ``name`` (under this run's prefix), with
        ``fields`` added or replaced."""
        return {"type": "hello", "protocol": 1, "engine": f"{self.prefix}-{name}",
                "workload_key": "k", "shape": SHAPE, **fields}  # fmt: skip

    async def opened(
        self, http: aiohttp.ClientSession, name: str, **extra: Any
    ) -> tuple[Conn, dict[str, Any]]:
        conn = await self.connect(http)
        await conn.send(self.hello(name, **{"workload_key": f"{self.prefix}-key", **extra}))
        welcome = await conn.next()
        expect(welcome.get("type") == "welcome", "a welcome", welcome)
        return conn, welcome

    async def welcome_then_decision(self, http: aiohttp.ClientSession) -> None:
        conn, welcome = await self.opened(http, "welcome")
        for key in ("session", "token", "resumed", "ack", "grace_s"):
            expect(key in welcome, f"welcome with {key}", welcome)
        expect(welcome["protocol"] == 1 and welcome["ack"] == 0, "protocol 1, ack 0", welcome)
        decision = await conn.next()
        expect(decision.get("type") == "decision", "a decision at once", decision)
        for key in ("dispatch", "ack", "next_in_s", "interval_s", "mode"):
            expect(key in decision, f"decision with {key}", decision)

    async def version_refused(self, http: aiohttp.ClientSession) -> None:
        conn = await self.connect(http)
        await conn.send(self.hello("v", protocol=99))
        error = await conn.next("error")
        expect(error["code"] == "version", "error version", error)
        expect(await conn.closed() == 4001, "close 4001", conn.ws.close_code)

    async def hello_first(self, http: aiohttp.ClientSession) -> None:
        conn = await self.connect(http)
        await conn.send({"type": "backlog", "seq": 1, "partitions": 1})
        error = await conn.next("error")
        expect(error["code"] == "hello_expected", "error hello_expected", error)
        expect(await conn.closed() == 4000, "close 4000", conn.ws.close_code)

    async def every_event_answered(self, http: aiohttp.ClientSession) -> None:
        conn, _ = await self.opened(http, "answered")
        await conn.next("decision")
        await conn.event("backlog", partitions=4)
        decision = await conn.next("decision")
        expect(decision["ack"] == 1 and decision["dispatch"] > 0, "ack 1, a dispatch", decision)

    async def malformed_does_not_end(self, http: aiohttp.ClientSession) -> None:
        conn, _ = await self.opened(http, "malformed")
        await conn.next("decision")
        await conn.send("{not json")
        error = await conn.next("error")
        expect(error["code"] == "malformed" and error["seq"] is None, "malformed, no seq", error)
        await conn.event("backlog", partitions=-1)
        error = await conn.next("error")
        expect(error["field"] == "partitions" and error["seq"] == 1, "field partitions", error)
        await conn.event("backlog", partitions=2)
        decision = await conn.next("decision")
        while decision["ack"] < 2:
            decision = await conn.next("decision")
        expect(decision["ack"] == 2, "the session goes on: ack 2", decision)

    async def unknown_partition(self, http: aiohttp.ClientSession) -> None:
        conn, _ = await self.opened(http, "unknown")
        await conn.event("gpu_started", partition="never-dispatched", worker=0)
        error = await conn.next("error")
        expect(error["code"] == "unknown_partition" and error["seq"] == 1, "unknown", error)

    async def wrong_state(self, http: aiohttp.ClientSession) -> None:
        conn, _ = await self.opened(http, "state")
        await conn.event("dispatched", partition="p")
        await conn.event("gpu_finished", partition="p", worker=0, gpu_s=1.0)
        error = await conn.next("error")
        expect(error["code"] == "wrong_state" and error["seq"] == 2, "wrong_state", error)

    async def out_of_order(self, http: aiohttp.ClientSession) -> None:
        conn, _ = await self.opened(http, "order")
        await conn.send({"type": "backlog", "seq": 5, "partitions": 1})
        error = await conn.next("error")
        expect(error["code"] == "out_of_order", "out_of_order", error)
        await conn.event("backlog", partitions=1)
        decision = await conn.next("decision")
        while decision["ack"] < 1:
            decision = await conn.next("decision")
        expect(decision["ack"] == 1, "seq 1 still expected", decision)

    async def advised_within_budget(self, http: aiohttp.ClientSession) -> None:
        conn, _ = await self.opened(http, "budget")
        await conn.event("backlog", partitions=10_000)
        total = 0
        for _ in range(5):
            total += (await conn.next("decision"))["dispatch"]
            await conn.event("backlog", partitions=10_000)
        budget = SHAPE["memory_budget_bytes"] // SHAPE["partition_bytes"]
        expect(0 < total <= budget, f"advised 1 to {budget} without dispatched events", total)

    async def resume_keeps_state(self, http: aiohttp.ClientSession) -> None:
        conn, welcome = await self.opened(http, "resume")
        await conn.event("backlog", partitions=3)
        await conn.event("dispatched", partition="kept")
        while (await conn.next("decision"))["ack"] < 2:
            pass
        await conn.ws.close()
        again, resumed = await self.opened(
            http, "resume", resume={"session": welcome["session"], "token": welcome["token"]}
        )
        expect(resumed["resumed"] and resumed["ack"] == 2, "resumed at ack 2", resumed)
        again.seq = 1
        await again.event("dispatched", partition="kept")  # a repeat: ignored, no error
        await again.event("synthesis_ready", partition="kept", synthesis_s=1.0)
        decision = await again.next()
        while decision.get("type") == "decision" and decision["ack"] < 3:
            decision = await again.next()
        expect(decision == {**decision, "type": "decision", "ack": 3}, "no error; ack 3", decision)

    async def bad_token_fresh_session(self, http: aiohttp.ClientSession) -> None:
        conn, welcome = await self.opened(http, "token")
        await conn.ws.close()
        _, fresh = await self.opened(
            http, "token", resume={"session": welcome["session"], "token": "wrong"}
        )
        expect(not fresh["resumed"] and fresh["ack"] == 0, "a fresh session", fresh)

    async def name_taken(self, http: aiohttp.ClientSession) -> None:
        first, _ = await self.opened(http, "taken")  # held open while the second says hello
        conn = await self.connect(http)
        await conn.send(self.hello("taken"))
        error = await conn.next("error")
        expect(error["code"] == "taken", "error taken", error)
        expect(await conn.closed() == 4002, "close 4002", conn.ws.close_code)
        expect(not first.ws.closed, "the first connection untouched", first.ws.close_code)

    async def bye_ends(self, http: aiohttp.ClientSession) -> None:
        conn, welcome = await self.opened(http, "bye")
        await conn.event("bye")
        expect(await conn.closed() == 1000, "close 1000", conn.ws.close_code)
        _, again = await self.opened(
            http, "bye", resume={"session": welcome["session"], "token": welcome["token"]}
        )
        expect(not again["resumed"], "the ended session is not resumed", again)

    async def decision_when_due(self, http: aiohttp.ClientSession) -> None:
        conn, _ = await self.opened(http, "due")
        await conn.event("backlog", partitions=100)
        for i in range(3):
            await conn.event("dispatched", partition=f"d{i}")
            await conn.event("synthesis_ready", partition=f"d{i}", synthesis_s=0.5)
            await conn.event("gpu_started", partition=f"d{i}", worker=0)
            await conn.event("gpu_finished", partition=f"d{i}", worker=0, gpu_s=0.05)
        decision = await conn.next("decision")
        while decision["ack"] < conn.seq:
            decision = await conn.next("decision")
        due = decision["next_in_s"]
        expect(due is not None, "a decision with next_in_s once rates are known", decision)
        timely = await conn.next("decision")  # no event sent: it comes because it is due
        expect(timely["ack"] == conn.seq, "a decision with no new event", timely)

    RULES = (
        "welcome_then_decision",
        "version_refused",
        "hello_first",
        "every_event_answered",
        "malformed_does_not_end",
        "unknown_partition",
        "wrong_state",
        "out_of_order",
        "advised_within_budget",
        "resume_keeps_state",
        "bad_token_fresh_session",
        "name_taken",
        "bye_ends",
        "decision_when_due",
    )

    async def run(self, out: Callable[[str], object] = print) -> dict[str, str | None]:
        """Every rule: its name to None (passed) or why it failed."""
        results: dict[str, str | None] = {}
        for name in self.RULES:
            rule: Callable[[aiohttp.ClientSession], Awaitable[None]] = getattr(self, name)
            async with aiohttp.ClientSession() as http:
                try:
                    await rule(http)
                    results[name] = None
                except (RuleFailedError, aiohttp.ClientError, TimeoutError) as exc:
                    results[name] = f"{type(exc).__name__}: {exc}"
            out(
                f"{'PASS' if results[name] is None else 'FAIL'} {name}"
                + ("" if results[name] is None else f": {results[name]}")
            )
        return results


def expect(holds: bool, what: str, seen: object) -> None:
    if not holds:
        raise RuleFailedError(f"expected {what}, got {seen!r}"[:500])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pacer.engine.conformance",
        description="Check a server of the engine protocol against each rule of "
        "docs/engine-protocol.md; one PASS or FAIL line a rule.",
    )
    parser.add_argument(
        "--url", required=True, help="the server's WebSocket, ws://host:port/v1/engine"
    )
    parser.add_argument("--token", help="the API token, where the server needs one")
    parser.add_argument(
        "--prefix",
        default=f"conformance-{secrets.token_hex(3)}",
        help="engine names begin with this (default: conformance-<random>)",
    )
    args = parser.parse_args(argv)
    results = asyncio.run(Suite(args.url, args.token, args.prefix).run())
    failed = sum(r is not None for r in results.values())
    print(f"{len(results) - failed} of {len(results)} rules pass")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
