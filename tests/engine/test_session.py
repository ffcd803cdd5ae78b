"""An engine session's logic on a virtual clock: events taken in, refused with the rule, the
decisions of its PI controller, and what it counts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pacer.config import ControllerSettings
from pacer.control.controller import PIController
from pacer.control.estimates import Estimates
from pacer.control.policy import Caps, Mode, Observation
from pacer.engine.protocol import Hello, ProtocolError, Shape, parse_hello
from pacer.engine.session import EngineSession
from tests.conftest import FakeClock

GIB = 1 << 30
SHAPE = Shape(gpu_workers=2, partition_bytes=GIB, memory_budget_bytes=16 * GIB, synthesis_slots=8)
SHAPE_JSON = {**vars(SHAPE), "devices": []}


def hello(**changes: Any) -> Hello:
    base = {"engine": "engine-a", "workload_key": "wk", "shape": SHAPE}
    return Hello(**{**base, **changes})


class Feed:
    """A session and the seq of its next event."""

    def __init__(self, clock: FakeClock, estimates: Estimates | None = None) -> None:
        self.session = EngineSession(hello(), ControllerSettings(), clock, estimates)
        self.seq = 0

    def send(self, kind: str, **fields: Any) -> Any:
        self.seq += 1
        return self.session.take(json.dumps({"type": kind, "seq": self.seq, **fields}))

    def refused(self, kind: str, **fields: Any) -> ProtocolError:
        with pytest.raises(ProtocolError) as caught:
            self.send(kind, **fields)
        return caught.value


def test_a_partition_goes_through_its_states_and_leaves_no_memory(clock: FakeClock) -> None:
    feed = Feed(clock)
    feed.send("dispatched", partition="p1")
    assert feed.session.inflight_bytes == GIB
    feed.send("synthesis_started", partition="p1")
    feed.send("synthesis_ready", partition="p1", synthesis_s=20.0)
    feed.send("gpu_started", partition="p1", worker=1)
    assert feed.session.observation().gpu_busy == 1
    feed.send("gpu_finished", partition="p1", worker=1, gpu_s=1.5)
    assert (feed.session.inflight, feed.session.ack, feed.session.gpu_busy_s) == (0, 5, 1.5)


def test_durations_come_from_the_events_not_from_the_clocks(clock: FakeClock) -> None:
    feed = Feed(clock)
    for i in range(3):
        feed.send("dispatched", partition=f"p{i}")
        feed.send("synthesis_ready", partition=f"p{i}", synthesis_s=30.0)
        feed.send("gpu_started", partition=f"p{i}", worker=0)
        feed.send("gpu_finished", partition=f"p{i}", worker=0, gpu_s=2.0)
    estimates = feed.session.controller.estimates
    assert (estimates.synthesis_s, estimates.gpu_service_s) == (30.0, 2.0)
    assert clock.now == 0.0  # no time passed on pacer's clock: durations are the engine's


def test_a_synthesis_time_in_the_slot_sets_the_rate_cap(clock: FakeClock) -> None:
    # 8 slots; each synthesis 4 s from dispatch, 1 s of it in its slot: the cap counts the
    # slots' own second, not the wait for a slot (D200).
    feed = Feed(clock)
    for i in range(40):
        feed.send("dispatched", partition=f"p{i}")
        feed.send("synthesis_ready", partition=f"p{i}", synthesis_s=4.0, compute_s=1.0)
        feed.send("gpu_started", partition=f"p{i}", worker=0)
        feed.send("gpu_finished", partition=f"p{i}", worker=0, gpu_s=2.0)
    controller = feed.session.controller
    assert controller.synthesis_supply_per_s == pytest.approx(8.0)
    assert controller.synthesis_handoff_s is None  # an engine reports no hand-off
    null = Feed(clock)
    null.send("dispatched", partition="q")
    null.send("synthesis_ready", partition="q", synthesis_s=None, compute_s=1.0)  # taken, unused
    assert null.session.controller.estimates.synthesis_s is None


@pytest.mark.parametrize(
    ("events", "code", "field"),
    [
        ([("gpu_started", {"partition": "ghost", "worker": 0})], "unknown_partition", "partition"),
        ([("dispatched", {"partition": "p"}), ("dispatched", {"partition": "p"})],
         "duplicate_partition", "partition"),
        ([("dispatched", {"partition": "p"}), ("gpu_started", {"partition": "p", "worker": 0})],
         "wrong_state", "partition"),
        ([("dispatched", {"partition": "p"}), ("synthesis_ready", {"partition": "p",
          "synthesis_s": 1.0}), ("gpu_started", {"partition": "p", "worker": 7})],
         "unknown_worker", "worker"),
        ([("synthesis_ready", {"partition": "p", "synthesis_s": -1})], "malformed", "synthesis_s"),
        ([("backlog", {"partitions": 1, "extra": 2})], "malformed", "extra"),
        ([("launch", {})], "malformed", "type"),
        ([("dispatched", {"partition": "p"}), ("synthesis_ready", {"partition": "p",
          "synthesis_s": 1.0, "compute_s": 1.5})], "malformed", "compute_s"),
        ([("dispatched", {"partition": "p"}), ("synthesis_ready", {"partition": "p",
          "synthesis_s": 1.0, "compute_s": "fast"})], "malformed", "compute_s"),
        ([("backlog", {"partitions": 1, "compute_s": 1.0})], "malformed", "compute_s"),
    ],
    ids=["unknown", "duplicate", "wrong-state", "unknown-worker", "negative", "unknown-field",
         "unknown-type", "compute-beyond-the-whole", "compute-not-a-number",
         "compute-on-another-event"],
)  # fmt: skip
def test_a_bad_event_is_refused_with_its_rule_and_the_session_goes_on(
    clock: FakeClock, events: list[tuple[str, dict[str, Any]]], code: str, field: str
) -> None:
    feed = Feed(clock)
    *good, (kind, fields) = events
    for k, f in good:
        feed.send(k, **f)
    error = feed.refused(kind, **fields)
    assert (error.code, error.field, error.seq) == (code, field, feed.seq)
    assert feed.session.ack == feed.seq  # taken in: the next seq goes on
    feed.send("backlog", partitions=3)
    assert feed.session.backlog == 3


def test_a_gap_in_seq_is_refused_and_a_repeat_ignored(clock: FakeClock) -> None:
    feed = Feed(clock)
    feed.send("backlog", partitions=5)
    with pytest.raises(ProtocolError) as gap:
        feed.session.take(json.dumps({"type": "backlog", "seq": 3, "partitions": 1}))
    assert (gap.value.code, feed.session.ack) == ("out_of_order", 1)
    with pytest.raises(ProtocolError) as repeat:
        feed.session.take(json.dumps({"type": "backlog", "seq": 1, "partitions": 9}))
    assert (repeat.value.code, feed.session.backlog) == ("repeat", 5)


def test_a_frame_that_is_not_json_takes_no_seq(clock: FakeClock) -> None:
    feed = Feed(clock)
    with pytest.raises(ProtocolError) as caught:
        feed.session.take("{not json")
    assert (caught.value.code, caught.value.seq, feed.session.ack) == ("malformed", None, 0)


def test_the_decision_is_the_pi_controllers_on_the_same_observation(clock: FakeClock) -> None:
    feed = Feed(clock)
    feed.send("backlog", partitions=100)
    twin = PIController(ControllerSettings(), Caps(8, 16), clock)
    expected = twin.decide(Observation(0, 0, 0, 2, 100, budget_free=16))
    decision = feed.session.decide()
    assert isinstance(feed.session.controller, PIController)
    assert decision["dispatch"] == expected.dispatch > 0
    assert decision["mode"] == Mode.BOOTSTRAP.value


def test_advised_partitions_count_until_dispatched_or_declined(clock: FakeClock) -> None:
    feed = Feed(clock)
    feed.send("backlog", partitions=100)
    advised = feed.session.decide()["dispatch"]
    assert feed.session.inflight == advised
    assert feed.session.decide()["dispatch"] == 0  # not advised twice
    feed.send("dispatched", partition="p0")
    feed.send("declined", count=advised - 1)
    assert (feed.session.owed, feed.session.inflight, feed.session.backlog) == (0, 1, 99)


def test_never_more_advised_than_the_memory_budget_holds(clock: FakeClock) -> None:
    feed = Feed(clock)
    feed.send("backlog", partitions=1000)
    total = 0
    for step in range(50):
        total += feed.session.decide()["dispatch"]
        clock.advance(1.0)
        assert feed.session.inflight <= SHAPE.inflight_cap, step
    assert total <= SHAPE.inflight_cap


def test_a_worker_down_stops_counting_and_its_gap_is_measured_on_pacers_clock(
    clock: FakeClock,
) -> None:
    feed = Feed(clock)
    for name in ("a", "b"):
        feed.send("dispatched", partition=name)
        feed.send("synthesis_ready", partition=name, synthesis_s=None)
    feed.send("gpu_started", partition="a", worker=0)
    clock.advance(1.0)
    feed.send("gpu_finished", partition="a", worker=0, gpu_s=None)
    clock.advance(0.25)
    assert feed.send("gpu_started", partition="b", worker=0).gap_s == 0.25
    feed.send("worker_down", worker=1)
    assert feed.session.observation().gpu_workers == 1
    assert feed.send("bye").ended


def test_saved_estimates_start_it_warm(clock: FakeClock) -> None:
    feed = Feed(clock, Estimates(gpu_service_s=2.0, synthesis_s=30.0))
    assert feed.session.controller.estimates.known


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"protocol": 2}, "protocol"),
        ({"shape": {**SHAPE_JSON, "gpu_workers": 0}}, "shape.gpu_workers"),
        ({"shape": {**SHAPE_JSON, "memory_budget_bytes": 1}}, "shape.memory_budget_bytes"),
        ({"shape": {**SHAPE_JSON, "devices": [0]}}, "shape.devices"),
        ({"fallback": {"mode": "cap"}}, "fallback.inflight"),
        ({"engine": ""}, "engine"),
        ({"resume": {"session": "s"}}, "resume.token"),
    ],
    ids=["version", "no-workers", "budget-below-a-partition", "devices", "cap-without-count",
         "empty-name", "resume-without-token"],
)  # fmt: skip
def test_a_hello_that_breaks_a_rule_names_the_field(change: dict[str, Any], field: str) -> None:
    shape = {**SHAPE_JSON, "devices": []}
    message = {"type": "hello", "protocol": 1, "engine": "e", "workload_key": "k",
               "shape": shape, **change}  # fmt: skip
    with pytest.raises(ProtocolError) as caught:
        parse_hello(message)
    assert caught.value.field == field
