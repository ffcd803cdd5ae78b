"""The engine hub on a virtual clock: answers to frames read together, decisions when the
controller asks for them, the grace period, the send queue's overflow. The same behaviour on
a real server is in test_stream.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from pacer.control.estimates import Estimates
from pacer.engine.hub import CLOSE_OVERFLOW, EngineHub, Live
from pacer.engine.protocol import parse_hello
from pacer.engine.store import EstimatesStore
from tests.conftest import FakeClock
from tests.engine.virtual import FakeSocket, VirtualScheduler
from tests.servers import settings_for
from tests.waits import until

SHAPE = {"synthesis_slots": 4, "gpu_workers": 2, "partition_bytes": 1 << 20,
         "memory_budget_bytes": 64 << 20}  # fmt: skip


def hub_on(tmp_path: Path, clock: FakeClock, **env: str) -> tuple[EngineHub, VirtualScheduler]:
    timers = VirtualScheduler(clock)
    settings = settings_for(tmp_path, PACER_WORKLOAD="noop", **env)
    hub = EngineHub(settings, CollectorRegistry(), clock, EstimatesStore(None), timers)
    return hub, timers


async def attached(hub: EngineHub, engine: str, ws: FakeSocket, key: str = "wk-hub") -> Live:
    hello = {"type": "hello", "protocol": 1, "engine": engine, "workload_key": key,
             "shape": SHAPE}  # fmt: skip
    return await hub.attach(parse_hello(hello), cast(web.WebSocketResponse, ws))


async def written(ws: FakeSocket, count: int) -> list[dict[str, Any]]:
    """The first ``count`` decisions, once the session's writer has sent them."""
    await until(lambda: len(ws.decisions()) >= count, f"{count} decisions written")
    return ws.decisions()[:count]


def frame(seq: int, kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, "seq": seq, **fields})


@pytest.mark.asyncio
async def test_frames_read_together_get_one_answer(tmp_path: Path, clock: FakeClock) -> None:
    hub, timers = hub_on(tmp_path, clock)
    ws = FakeSocket()
    live = await attached(hub, "together", ws)
    await written(ws, 1)  # the first decision: no backlog, nothing advised
    for seq in (1, 2, 3):
        assert hub.received(live, frame(seq, "worker_up", worker=seq + 1), 0.0)
    assert timers.run_ready() == 1
    decisions = await written(ws, 2)
    assert decisions[1]["ack"] == 3
    assert live.session.snapshot()["gpu_workers"] == 5


@pytest.mark.asyncio
async def test_decisions_come_when_the_controller_asks(tmp_path: Path, clock: FakeClock) -> None:
    hub, timers = hub_on(tmp_path, clock)
    hub.store.put("wk-paced", Estimates(0.5, 2.0, 0.1))  # warm: the controller paces
    ws = FakeSocket()
    live = await attached(hub, "paced", ws, key="wk-paced")
    assert hub.received(live, frame(1, "backlog", partitions=1000), 0.0)
    timers.run_ready()
    first = (await written(ws, 2))[1]
    assert first["ack"] == 1
    assert first["next_in_s"] is not None
    timers.advance(first["next_in_s"] * 0.5)
    assert len(ws.decisions()) == 2  # not due yet: nothing sent
    decided = live.session.decisions
    timers.advance(first["next_in_s"])
    await written(ws, 3)
    assert live.session.decisions == decided + 1  # the timer asked the controller
    assert timers.next_at is not None
    assert timers.next_at > clock()


@pytest.mark.asyncio
async def test_an_event_between_decisions_is_acknowledged_without_deciding(
    tmp_path: Path, clock: FakeClock
) -> None:
    hub, timers = hub_on(tmp_path, clock)
    hub.store.put("wk-ack", Estimates(0.5, 2.0, 0.1))
    ws = FakeSocket()
    live = await attached(hub, "acking", ws, key="wk-ack")
    hub.received(live, frame(1, "backlog", partitions=1000), 0.0)
    timers.run_ready()
    advised = (await written(ws, 2))[1]
    assert advised["dispatch"] > 0
    assert advised["next_in_s"] > 0
    decided = live.session.decisions
    hub.received(live, frame(2, "dispatched", partition="p0"), 0.0)
    timers.run_ready()
    answer = (await written(ws, 3))[2]
    assert (answer["ack"], answer["dispatch"]) == (2, 0)
    assert answer["next_in_s"] == pytest.approx(advised["next_in_s"])  # the clock stood still
    assert live.session.decisions == decided
    hub.received(live, frame(3, "worker_down", worker=0), 0.0)  # changes what it would decide
    timers.run_ready()
    await written(ws, 4)
    assert live.session.decisions == decided + 1


@pytest.mark.asyncio
async def test_a_session_ends_when_its_grace_runs_out(tmp_path: Path, clock: FakeClock) -> None:
    hub, timers = hub_on(tmp_path, clock, PACER_ENGINE__GRACE_S="30")
    ws = FakeSocket()
    live = await attached(hub, "graceful", ws, key="wk-grace")
    hub.received(live, frame(1, "dispatched", partition="p0"), 0.0)
    hub.received(live, frame(2, "synthesis_ready", partition="p0", synthesis_s=2.0), 0.0)
    hub.received(live, frame(3, "gpu_started", partition="p0", worker=0), 0.0)
    hub.received(live, frame(4, "gpu_finished", partition="p0", worker=0, gpu_s=0.5), 0.0)
    timers.run_ready()
    hub.detached(live, cast(web.WebSocketResponse, ws))
    timers.advance(29.9)
    assert live.id in hub.sessions  # waits for its engine
    timers.advance(0.2)
    await until(lambda: live.id not in hub.sessions, "the session to end")
    saved = hub.store.get("wk-grace")
    assert saved is not None
    assert saved.gpu_service_s == pytest.approx(0.5)


@pytest.mark.asyncio
async def test_a_resume_within_the_grace_keeps_the_session(
    tmp_path: Path, clock: FakeClock
) -> None:
    hub, timers = hub_on(tmp_path, clock, PACER_ENGINE__GRACE_S="30")
    first = FakeSocket()
    live = await attached(hub, "resuming", first)
    hub.received(live, frame(1, "backlog", partitions=5), 0.0)
    timers.run_ready()
    hub.detached(live, cast(web.WebSocketResponse, first))
    timers.advance(20.0)
    hello = {"type": "hello", "protocol": 1, "engine": "resuming", "workload_key": "wk-hub",
             "shape": SHAPE, "resume": {"session": live.id, "token": live.token}}  # fmt: skip
    again = FakeSocket()
    assert await hub.attach(parse_hello(hello), cast(web.WebSocketResponse, again)) is live
    timers.advance(60.0)  # past the first grace: cancelled by the resume
    assert hub.sessions.get(live.id) is live
    await until(lambda: again.sent, "the welcome")
    assert (again.sent[0]["resumed"], again.sent[0]["ack"]) == (True, 1)


@pytest.mark.asyncio
async def test_an_engine_that_does_not_read_overflows_and_is_dropped(
    tmp_path: Path, clock: FakeClock
) -> None:
    hub, timers = hub_on(tmp_path, clock, PACER_ENGINE__SEND_QUEUE="4")
    stuck, other = FakeSocket(blocked=True), FakeSocket()
    live = await attached(hub, "stuck", stuck)
    peer = await attached(hub, "reading", other)
    for seq in range(1, 10):
        hub.received(live, frame(seq, "worker_up", worker=seq), 0.0)
        timers.run_ready()
        await asyncio.sleep(0)  # the writer takes one, then waits on its send forever
    assert live.id not in hub.sessions
    await until(lambda: stuck.close_code == CLOSE_OVERFLOW, "the overflow to close it")
    hub.received(peer, frame(1, "worker_up", worker=3), 0.0)
    timers.run_ready()
    assert (await written(other, 2))[1]["ack"] == 1  # the other session goes on
