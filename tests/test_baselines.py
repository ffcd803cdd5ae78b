"""The baseline dispatch policies on a virtual clock: what they dispatch, and the mode they
report to metrics and status."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pacer.baselines import CuzkPacer, FixedConcurrency, Unpaced
from pacer.policy import Decision, DispatchPolicy, Mode, Observation
from tests.conftest import FakeClock

MAKERS: dict[str, Callable[[FakeClock], DispatchPolicy]] = {
    "unpaced": lambda clock: Unpaced(10),
    "fixed": lambda clock: FixedConcurrency(4, 10),
    "cuzk": lambda clock: CuzkPacer(10, clock),
}


def obs(backlog: int, ready: int = 0, synthesizing: int = 0, gpu_busy: int = 0) -> Observation:
    return Observation(ready, synthesizing, gpu_busy, gpu_workers=2, backlog=backlog)


@pytest.mark.parametrize("name", MAKERS)
def test_drained_until_there_is_work_and_once_it_is_done(name: str, clock: FakeClock) -> None:
    policy = MAKERS[name](clock)
    assert policy.mode is Mode.DRAINED
    assert policy.decide(obs(backlog=0)) == Decision(0, None)
    assert policy.mode is Mode.DRAINED
    assert policy.decide(obs(backlog=5)).dispatch >= 1
    assert policy.mode is not Mode.DRAINED
    policy.decide(obs(backlog=0, ready=1))  # the last partition waits for a GPU
    assert policy.mode is not Mode.DRAINED
    policy.decide(obs(backlog=0))
    assert policy.mode is Mode.DRAINED


def test_unpaced_fills_the_memory_budget_at_once(clock: FakeClock) -> None:
    policy = Unpaced(memory_slots=10)
    assert policy.decide(obs(backlog=100, ready=1, synthesizing=3)) == Decision(6, None)
    assert policy.decide(obs(backlog=3)) == Decision(3, None)
    assert policy.decide(obs(backlog=100, synthesizing=10)) == Decision(0, None)
    assert (policy.mode, policy.interval_s(), policy.bootstraps) == (Mode.PACING, 0.0, 0)


def test_cuzk_bootstraps_three_seconds_apart_then_paces(clock: FakeClock) -> None:
    policy = CuzkPacer(memory_slots=100, clock=clock)
    sent = 0
    for step in range(CuzkPacer.TARGET):
        decision = policy.decide(obs(backlog=50, synthesizing=sent))
        assert decision.dispatch == 1, step
        sent += 1
        assert policy.mode is Mode.BOOTSTRAP
        clock.advance(1.0)
        assert policy.decide(obs(backlog=50, synthesizing=sent)).dispatch == 0  # not yet due
        clock.advance(CuzkPacer.BOOTSTRAP_SPACING_S - 1.0)
    assert decision == Decision(1, None)  # bootstrap sent: ask again on the next event
    assert policy.bootstraps == 1
    policy.observe_gpu_service(2.0)
    assert policy.mode is Mode.PACING
    decision = policy.decide(obs(backlog=50, ready=1, synthesizing=sent - 2, gpu_busy=1))
    assert decision.dispatch == 1
    assert decision.next_at == pytest.approx(clock.now + policy.interval_s())
    assert CuzkPacer.INTERVAL_S[0] <= policy.interval_s() <= CuzkPacer.INTERVAL_S[1]


def test_cuzk_waits_for_a_gpu_completion_after_its_bootstrap(clock: FakeClock) -> None:
    policy = CuzkPacer(memory_slots=100, clock=clock)
    sent = 0
    for _ in range(CuzkPacer.TARGET):
        sent += policy.decide(obs(backlog=50, synthesizing=sent)).dispatch
        clock.advance(CuzkPacer.BOOTSTRAP_SPACING_S)
    assert sent == CuzkPacer.TARGET
    for _ in range(10):  # synthesis is slow: no GPU has finished anything yet
        clock.advance(CuzkPacer.BOOTSTRAP_SPACING_S)
        assert policy.decide(obs(backlog=50, synthesizing=sent)) == Decision(0, None)
    policy.observe_gpu_service(2.0)
    assert policy.decide(obs(backlog=50, ready=2, synthesizing=sent - 3, gpu_busy=1)).dispatch == 1
