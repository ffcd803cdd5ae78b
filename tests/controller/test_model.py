"""The setpoint where the synthesis slots barely outpace the GPUs (``Model.near_balance``)."""

from __future__ import annotations

import math

import pytest

from pacer.config import ControllerSettings
from pacer.control.controller import PIController
from pacer.control.estimates import Estimates, Estimator
from pacer.control.model import Model
from pacer.control.policy import Caps, Observation


def estimator() -> Estimator:
    """Two GPU workers at 0.16 s (12.5 partitions a second, no spread) fed by syntheses of
    1 s and 3 s in turn (mean 2 s, cv ½): 25 slots keep up with the GPUs exactly."""
    est = Estimator(64, 64, Estimates())
    for i in range(64):
        est.observe_gpu_service(0.16)
        est.observe_synthesis(1.0 if i % 2 else 3.0, float(i))
    return est


def setpoint(slots: int | None, **settings: float) -> float:
    caps = None if slots is None else Caps(synthesis_concurrency=slots, inflight_partitions=100)
    return Model(estimator(), ControllerSettings(**settings), caps).at(workers=2)[1]


def test_slots_to_spare_leave_the_setpoint_as_the_spread_sets_it() -> None:
    # 64 slots of 2 s refill a setpoint of 8 at 19.5 a second: well within half a lead time.
    assert setpoint(64) == setpoint(None) == 8.0


def test_near_balance_the_setpoint_is_the_buffer_of_a_random_walk_with_the_slots_surplus() -> None:
    est = estimator()
    surplus, rate = 26 / 2.0 - 12.5, 12.5  # 26 slots: half a partition a second to spare
    variance = est.flow_variance(rate)
    assert variance == pytest.approx(rate * (est.synthesis_sd_s / 2.0) ** 2)
    buffer = variance / (2 * surplus) * math.log(1 + surplus / (0.002 * rate))
    assert buffer > 8.0  # refilling 8 at the surplus takes 16 s, eight lead times: in full
    assert setpoint(26) == pytest.approx(buffer)


def test_the_setpoint_falls_as_the_slots_surplus_grows() -> None:
    points = [setpoint(slots) for slots in range(26, 48)]
    assert points == sorted(points, reverse=True)
    assert points[0] > points[-1] == 8.0


def test_where_the_slots_cannot_keep_up_every_one_is_kept_busy_within_the_budget() -> None:
    assert setpoint(24) == setpoint(12) == 100.0  # the memory budget, in partitions


def test_a_smaller_idle_share_holds_a_larger_buffer() -> None:
    points = [setpoint(27, near_balance_idle=idle) for idle in (0.05, 0.01, 0.002, 0.0005)]
    assert points == sorted(points)
    assert points[0] < points[-1] <= 100.0


def test_an_idle_share_of_zero_turns_it_off() -> None:
    assert setpoint(26, near_balance_idle=0.0) == setpoint(12, near_balance_idle=0.0) == 8.0


def test_a_retune_of_the_idle_share_moves_the_setpoint_at_once() -> None:
    # 26 slots of 2 s (cv ½) against 12.5 a second: half a partition a second to spare.
    warm = Estimates(gpu_service_s=0.16, synthesis_s=2.0, synthesis_sd_s=1.0)
    c = PIController(ControllerSettings(), Caps(26, 100), clock=lambda: 0.0, estimates=warm)
    obs = Observation(ready=0, synthesizing=20, gpu_busy=2, gpu_workers=2, backlog=100)
    setpoints = []
    for idle in (0.002, 0.0005, 0.0):
        c.retune(near_balance_idle=idle)
        c.decide(obs)
        setpoints.append(c.terms.setpoint)
    assert setpoints[1] > setpoints[0] > setpoints[2] == 8.0


def observed(synthesizing: int, seconds: int = 60) -> Model:
    """A model of 26 processes with a queue in front, ``synthesizing`` in flight all along."""
    caps = Caps(synthesis_concurrency=26, inflight_partitions=100, synthesis_queue=True)
    model = Model(estimator(), ControllerSettings(), caps)
    for t in range(seconds):
        model.observe_synthesizing(float(t), synthesizing)
    return model


def test_the_wait_in_front_of_the_processes_is_not_taken_for_slots() -> None:
    # 26 busy and 13 waiting all along: a third of T̂syn's 2 s is the wait, so the processes
    # take 4/3 s a synthesis and finish 19.5 a second, slots to spare.
    queued = observed(39)
    assert queued.occupancy.busy_share == pytest.approx(2 / 3)
    assert queued.slots_rate() == pytest.approx(19.5)
    assert queued.at(workers=2)[1] == 8.0
    # Nothing waiting: the same 26 processes of 2 s finish 13 a second against the GPUs'
    # 12.5, near balance, and the setpoint is the random walk's buffer as on a host
    # without a queue (the queue's room counted as slots would call it slots to spare).
    unqueued = observed(26)
    assert unqueued.slots_rate() == pytest.approx(13.0)
    assert unqueued.at(workers=2)[1] == pytest.approx(setpoint(26))
    assert setpoint(26) > 8.0


def test_the_controller_tells_what_synthesis_can_supply() -> None:
    # 26 slots of 2 s with nothing waiting for them: 13 a second, below the rate cap, which
    # counts the slots' ends that bunch up as well (D193).
    warm = Estimates(gpu_service_s=0.16, synthesis_s=2.0, synthesis_sd_s=1.0)
    c = PIController(ControllerSettings(), Caps(26, 100), clock=lambda: 0.0, estimates=warm)
    assert c.synthesis_supply_per_s == pytest.approx(13.0)
    c.decide(Observation(ready=0, synthesizing=20, gpu_busy=2, gpu_workers=2, backlog=100))
    assert c.terms.rate_cap_per_s > c.synthesis_supply_per_s
    cold = PIController(ControllerSettings(), Caps(26, 100), clock=lambda: 0.0)
    assert cold.synthesis_supply_per_s == 0.0  # no synthesis time yet
