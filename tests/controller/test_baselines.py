"""The baseline dispatch policies on a virtual clock: what they dispatch, and the mode they
report to metrics and status. The cuzk port is checked rule by rule against cuzk's dispatch
loop (the rules and their source lines: ``CuzkPacer``'s docstring)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pacer.control.baselines import CuzkPacer, FixedConcurrency, Unpaced
from pacer.control.policy import Decision, DispatchPolicy, Mode, Observation
from tests.conftest import FakeClock

MAKERS: dict[str, Callable[[FakeClock], DispatchPolicy]] = {
    "unpaced": lambda clock: Unpaced(10),
    "fixed": lambda clock: FixedConcurrency(4, 10),
    "cuzk": lambda clock: CuzkPacer(10, clock),
    "cuzk-default": lambda clock: CuzkPacer(10, clock, target=0),
}
TARGET = CuzkPacer.TARGET


def obs(backlog: int, ready: int = 0, synthesizing: int = 0, gpu_busy: int = 0) -> Observation:
    return Observation(ready, synthesizing, gpu_busy, gpu_workers=2, backlog=backlog)


@pytest.mark.parametrize("name", MAKERS)
def test_drained_until_there_is_work_and_once_it_is_done(name: str, clock: FakeClock) -> None:
    policy = MAKERS[name](clock)
    assert policy.mode is Mode.DRAINED
    assert policy.decide(obs(backlog=0)).dispatch == 0
    assert policy.mode is Mode.DRAINED
    clock.advance(CuzkPacer.BOOTSTRAP_SPACING_S)  # cuzk's first dispatch waits 3 s
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
    assert policy.synthesis_workers is None


# -- cuzk: bootstrap ----------------------------------------------------------------------


def test_cuzk_dispatches_first_three_seconds_after_it_starts(clock: FakeClock) -> None:
    policy = CuzkPacer(memory_slots=100, clock=clock)
    assert policy.decide(obs(backlog=50)) == Decision(0, 3.0)
    clock.now = 2.999
    assert policy.decide(obs(backlog=50)) == Decision(0, 3.0)
    clock.now = 3.0
    assert policy.decide(obs(backlog=50)) == Decision(1, 6.0)  # no GPU time yet: 3 s apart
    assert (policy.mode, policy.bootstraps) == (Mode.BOOTSTRAP, 1)


def test_cuzk_started_long_before_work_dispatches_it_as_it_comes(clock: FakeClock) -> None:
    policy = CuzkPacer(memory_slots=100, clock=clock)
    clock.now = 100.0
    assert policy.decide(obs(backlog=0)) == Decision(0, None)  # its timer went; waits for work
    assert policy.decide(obs(backlog=5)) == Decision(1, 103.0)


def test_cuzk_bootstrap_dispatches_on_each_gpu_completion(clock: FakeClock) -> None:
    policy = CuzkPacer(memory_slots=100, clock=clock)
    clock.now = 3.0
    assert policy.decide(obs(backlog=50)).dispatch == 1
    clock.now = 4.5
    policy.observe_gpu_service(1.0)
    # The completion ends the 3 s sleep and dispatches; the next sleep is max(2 s, 1 s ÷ 2).
    assert policy.decide(obs(backlog=50, synthesizing=1)) == Decision(1, 6.5)
    clock.now = 6.0  # the sleep the completion cut short would have ended here
    assert policy.decide(obs(backlog=50, synthesizing=2)) == Decision(0, 6.5)
    clock.now = 6.5
    assert policy.decide(obs(backlog=50, synthesizing=2)) == Decision(1, 8.5)


@pytest.mark.parametrize(("gpu_s", "spacing_s"), [(1.0, 2.0), (6.0, 3.0)], ids=["2s", "gpu"])
def test_cuzk_bootstrap_spacing_once_the_gpu_time_is_known(
    clock: FakeClock, gpu_s: float, spacing_s: float
) -> None:
    # max(2 s, GPU time ÷ GPU workers), 2 workers here.
    policy = CuzkPacer(memory_slots=100, clock=clock)
    clock.now = 3.0
    policy.decide(obs(backlog=50))
    clock.now = 4.0
    policy.observe_gpu_service(gpu_s)
    assert policy.decide(obs(backlog=50)) == Decision(1, 4.0 + spacing_s)
    assert policy.interval_s() == spacing_s


def test_cuzk_waits_for_the_first_gpu_completion_after_its_bootstrap(clock: FakeClock) -> None:
    policy = CuzkPacer(memory_slots=100, clock=clock)
    sent = 0
    for k in range(1, TARGET + 1):
        clock.now = 3.0 * k
        sent += policy.decide(obs(backlog=50, synthesizing=sent)).dispatch
    assert sent == TARGET
    for _ in range(5):  # synthesis is slow: no GPU has finished anything yet
        clock.advance(10.0)
        assert policy.decide(obs(backlog=50, synthesizing=sent)) == Decision(0, None)
    assert policy.mode is Mode.BOOTSTRAP
    policy.observe_gpu_service(2.0)
    decision = policy.decide(obs(backlog=50, ready=2, synthesizing=sent - 3, gpu_busy=1))
    assert (decision.dispatch, policy.mode) == (1, Mode.PACING)  # at once, then PI pacing
    assert decision.next_at == pytest.approx(clock.now + policy.interval_s())


def pacing(clock: FakeClock, gpu_s: float = 1.0, slots: int = 100) -> CuzkPacer:
    """A cuzk pacer past its bootstrap: 8 dispatched, 7 through a GPU (``gpu_s`` each)."""
    policy = CuzkPacer(memory_slots=slots, clock=clock)
    clock.now = 3.0
    sent = policy.decide(obs(backlog=50)).dispatch
    for _ in range(TARGET - 1):  # each completion in bootstrap dispatches one more
        clock.advance(0.1)
        policy.observe_gpu_service(gpu_s)
        sent += policy.decide(obs(backlog=50, synthesizing=1, gpu_busy=1)).dispatch
    assert (sent, policy.mode) == (TARGET, Mode.PACING)
    return policy


# -- cuzk: pacing -------------------------------------------------------------------------


def test_cuzk_pacing_interval_follows_its_pi_rule(clock: FakeClock) -> None:
    policy = pacing(clock, gpu_s=1.0)
    # PV ≈ 0, so e ≈ 1: multiplier 1 + 0.5 + 0.001·∫ (∫ ≈ 3.7 s of error 1), interval
    # (1 s ÷ 2) ÷ 1.5037, whole milliseconds.
    assert policy.interval_s() == pytest.approx(0.332, abs=0.001)
    assert round(policy.interval_s() * 1000) == policy.interval_s() * 1000
    many = pacing(FakeClock(), gpu_s=0.01)
    assert many.interval_s() == 0.05  # floor of 50 ms


def test_cuzk_updates_pv_and_the_interval_on_every_pass(clock: FakeClock) -> None:
    policy = pacing(clock)
    intervals = []
    for _ in range(8):  # a completion is a pass: no dispatch, the PV moves toward 16
        clock.advance(0.05)
        policy.observe_gpu_service(1.0)
        decision = policy.decide(obs(backlog=50, ready=2 * TARGET, synthesizing=5, gpu_busy=2))
        assert decision == Decision(0, clock.now + policy.interval_s())
        intervals.append(policy.interval_s())
    assert intervals == sorted(intervals)
    assert intervals[-1] > intervals[0]
    assert intervals[-1] > 0.5  # PV above the target: slower than the GPU's 0.5 s


def test_cuzk_gpu_completion_restarts_the_pacing_timer(clock: FakeClock) -> None:
    policy = pacing(clock)
    due = policy.decide(obs(backlog=50, synthesizing=7, gpu_busy=1)).next_at
    assert due is not None
    clock.now = due - 0.01
    policy.observe_gpu_service(1.0)
    restarted = policy.decide(obs(backlog=50, synthesizing=7, gpu_busy=1))
    assert restarted.dispatch == 0
    assert restarted.next_at == clock.now + policy.interval_s()
    assert restarted.next_at is not None
    assert restarted.next_at > due
    clock.now = due
    assert policy.decide(obs(backlog=50, synthesizing=7, gpu_busy=1)).dispatch == 0
    clock.now = restarted.next_at
    assert policy.decide(obs(backlog=50, synthesizing=7, gpu_busy=1)).dispatch == 1


# -- cuzk: re-bootstrap -------------------------------------------------------------------


def test_cuzk_rebootstraps_when_all_it_dispatched_is_through(clock: FakeClock) -> None:
    policy = pacing(clock, gpu_s=1.0)  # 8 dispatched, 7 through
    clock.advance(0.1)
    policy.observe_gpu_service(1.0)  # the 8th: nothing in flight, PV < 1
    decision = policy.decide(obs(backlog=50))
    assert (policy.rebootstraps, policy.mode) == (1, Mode.BOOTSTRAP)
    assert decision == Decision(0, clock.now + 2.0)  # spaced max(2 s, 0.5 s)
    clock.advance(2.0)
    assert policy.decide(obs(backlog=50)) == Decision(1, clock.now + 2.0)


def test_cuzk_does_not_rebootstrap_with_work_in_flight(clock: FakeClock) -> None:
    policy = pacing(clock)  # 8 dispatched, 7 through, none waiting: PV < 1
    due = policy.decide(obs(backlog=50, synthesizing=1)).next_at
    assert due is not None
    clock.now = due
    assert policy.decide(obs(backlog=50, synthesizing=1)).dispatch == 1  # 9 dispatched
    clock.advance(0.01)
    policy.observe_gpu_service(1.0)  # 8 through, one in flight: a pass, PV < 1
    policy.decide(obs(backlog=50, synthesizing=1))
    assert (policy.rebootstraps, policy.mode) == (0, Mode.PACING)
    clock.advance(0.01)
    policy.observe_gpu_service(1.0)  # all 9 through
    policy.decide(obs(backlog=50))
    assert (policy.rebootstraps, policy.mode) == (1, Mode.BOOTSTRAP)


def test_cuzk_checks_for_a_drain_only_at_the_top_of_its_loop(clock: FakeClock) -> None:
    policy = pacing(clock)
    due = policy.decide(obs(backlog=0, synthesizing=1)).next_at
    assert due is not None
    clock.now = due
    assert policy.decide(obs(backlog=0, synthesizing=1)) == Decision(0, None)  # waits for work
    clock.advance(1.0)
    policy.observe_gpu_service(1.0)  # the last one through: drained, but it waits for work
    assert policy.decide(obs(backlog=0)) == Decision(0, None)
    clock.advance(60.0)
    decision = policy.decide(obs(backlog=10))  # new work goes out at once, unpaced
    assert decision.dispatch == 1
    assert (policy.rebootstraps, policy.mode) == (0, Mode.PACING)  # one in flight again


# -- cuzk: memory, synthesis workers ------------------------------------------------------


def test_cuzk_a_completion_while_waiting_for_memory_is_kept(clock: FakeClock) -> None:
    policy = CuzkPacer(memory_slots=1, clock=clock)
    clock.now = 3.0
    assert policy.decide(obs(backlog=50)) == Decision(1, 6.0)
    clock.now = 6.0
    assert policy.decide(obs(backlog=50, synthesizing=1)) == Decision(0, None)  # budget full
    clock.now = 7.0
    policy.observe_gpu_service(1.0)  # frees the memory; cuzk was not listening for it
    assert policy.decide(obs(backlog=50)) == Decision(1, None)
    # The kept completion ended the next bootstrap sleep at once: the loop waits on memory.
    clock.now = 7.5
    assert policy.decide(obs(backlog=50)) == Decision(1, 9.5)


@pytest.mark.parametrize(
    ("slots", "max_parallel", "workers"),
    [(100, 18, 18), (10, 18, 10), (1, 18, 2), (100, 4, 4)],
    ids=["max-parallel", "budget", "at-least-2", "set"],
)
def test_cuzk_synthesis_workers(slots: int, max_parallel: int, workers: int) -> None:
    policy = CuzkPacer(slots, FakeClock(), max_parallel_synthesis=max_parallel)
    assert policy.synthesis_workers == workers
    assert CuzkPacer(slots, FakeClock()).synthesis_workers == max(2, min(slots, 18))


def test_cuzk_keeps_its_workers_and_channel_full_at_most(clock: FakeClock) -> None:
    policy = CuzkPacer(100, clock, target=0, max_parallel_synthesis=4)
    assert policy.decide(obs(backlog=50)) == Decision(8, None)  # 4 workers, 4 places
    assert policy.decide(obs(backlog=50, synthesizing=8)) == Decision(0, None)
    assert policy.decide(obs(backlog=50, synthesizing=7, ready=3)) == Decision(1, None)


@pytest.mark.parametrize(
    "kwargs",
    [{"target": -1}, {"max_parallel_synthesis": 0}],
    ids=["target", "max-parallel"],
)
def test_cuzk_refuses_bad_settings(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="must be at least"):
        CuzkPacer(10, FakeClock(), **kwargs)


# -- cuzk-default: the pacer off ----------------------------------------------------------


def test_cuzk_default_dispatches_what_memory_and_its_workers_take(clock: FakeClock) -> None:
    policy = CuzkPacer(memory_slots=20, clock=clock, target=0, max_parallel_synthesis=18)
    assert policy.decide(obs(backlog=50)) == Decision(20, None)  # the budget first
    assert policy.decide(obs(backlog=50, synthesizing=20)) == Decision(0, None)
    assert policy.decide(obs(backlog=3, synthesizing=15)) == Decision(3, None)
    big = CuzkPacer(memory_slots=100, clock=clock, target=0, max_parallel_synthesis=18)
    assert big.decide(obs(backlog=100, ready=10)) == Decision(36, None)  # 18 + 18 places
    for _ in range(5):
        clock.advance(0.01)
        policy.observe_gpu_service(1.0)  # GPU completions change nothing
        assert policy.decide(obs(backlog=50, ready=19, gpu_busy=1)) == Decision(0, None)
    assert (policy.mode, policy.interval_s()) == (Mode.PACING, 0.0)
    assert (policy.bootstraps, policy.rebootstraps) == (0, 0)
