"""The queue pi keeps in front of the synthesis processes: its size, and dispatch up to it."""

from __future__ import annotations

import pytest

from pacer.config import ControllerSettings
from pacer.control.controller import PIController
from pacer.control.estimates import Estimates
from pacer.control.policy import Caps, Observation, SynthesisParts
from pacer.control.rate_dispatch import executor_queue
from tests.conftest import FakeClock


@pytest.mark.parametrize(
    ("processes", "cv", "queue"),
    [(16, 0.0, 1), (16, 0.1, 2), (16, 0.2, 3), (16, 1.3, 12), (4, 0.2, 2), (4, 5.0, 4),
     (1, 0.0, 1)],
    ids=["fixed-durations", "narrow", "h200", "lognormal-sigma-1", "few-processes",
         "at-most-one-a-process", "one-process"],
)  # fmt: skip
def test_the_queue_covers_the_hand_off_and_two_sigmas_of_bunched_ends(
    processes: int, cv: float, queue: int
) -> None:
    # 1 + ceil(2 · cv · √processes), at most one a process.
    assert executor_queue(processes, cv, 2.0) == queue


def test_the_queue_grows_with_the_spread_and_none_is_kept_at_zero_sigmas() -> None:
    sizes = [executor_queue(64, cv / 10, 2.0) for cv in range(30)]
    assert sizes == sorted(sizes)
    assert (sizes[0], sizes[-1]) == (1, 48)
    assert executor_queue(64, 1.0, 0.0) == 0


@pytest.mark.parametrize(
    ("processes", "cv", "sigmas"), [(0, 0.1, 2.0), (4, -0.1, 2.0), (4, 0.1, -1.0)]
)
def test_a_queue_of_nonsense_is_refused_naming_the_rule(
    processes: int, cv: float, sigmas: float
) -> None:
    with pytest.raises(ValueError, match="processes >= 1 and cv, sigmas and in_transit >= 0"):
        executor_queue(processes, cv, sigmas)


def sixteen_processes(clock: FakeClock, queue: bool, queue_sigmas: float) -> PIController:
    # An H200's two workers at 0.32 s each fed by 16 processes at 1.4 s ± 0.28 s (cv 0.2).
    warm = Estimates(gpu_service_s=0.32, synthesis_s=1.4, synthesis_sd_s=0.28)
    caps = Caps(synthesis_concurrency=16, inflight_partitions=32, synthesis_queue=queue)
    return PIController(ControllerSettings(), caps, clock, warm, queue_sigmas=queue_sigmas)


@pytest.mark.parametrize(
    ("queue", "queue_sigmas", "queued", "bunched"),
    [(True, 2.0, 3, 3), (True, 0.0, 0, 0), (False, 2.0, 0, 3)],
    ids=["queue", "no-sigmas", "syntheses-share-the-cores"],
)
def test_with_every_process_busy_pi_dispatches_the_queue_and_no_more(
    clock: FakeClock, queue: bool, queue_sigmas: float, queued: int, bunched: int
) -> None:
    c = sixteen_processes(clock, queue, queue_sigmas)
    synthesizing, sent = 16, 0
    for _ in range(20):  # the GPUs short of work: pi wants more than synthesis can take
        clock.advance(0.1)
        decision = c.decide(Observation(ready=0, synthesizing=synthesizing, gpu_busy=2,
                                        gpu_workers=2, backlog=1000))  # fmt: skip
        synthesizing += decision.dispatch
        sent += decision.dispatch
    assert (c.synthesis_queue(), sent) == (queued, queued)
    # The synthesis rate cap counts the ends that bunch up, which the queue holds where there
    # is one: T̂syn runs from dispatch and holds its wait.
    assert c.ends_bunched() == bunched
    assert c.terms.rate_cap_per_s == pytest.approx((16 + bunched) / 1.4, rel=0.05)


@pytest.mark.parametrize(
    ("in_transit", "queue"), [(0.0, 2), (0.4, 2), (1.0, 2), (2.4, 4), (4.8, 6), (30.0, 8)]
)
def test_the_queue_covers_what_the_hand_off_keeps_on_its_way(in_transit: float, queue: int) -> None:
    # 8 processes, cv 0.05: one for the bunched ends, and the partitions in transit rounded
    # up (at least one); at most one a process.
    assert executor_queue(8, 0.05, 2.0, in_transit) == queue


def eight_processes(clock: FakeClock) -> PIController:
    # GPUs that prove 12.5 a second fed by 8 processes: synthesis bounds.
    warm = Estimates(gpu_service_s=0.16, synthesis_s=1.3, synthesis_sd_s=0.05)
    caps = Caps(synthesis_concurrency=8, inflight_partitions=21, synthesis_queue=True)
    return PIController(ControllerSettings(), caps, clock, warm)


def test_a_measured_hand_off_sizes_the_queue_and_leaves_the_rate_cap(clock: FakeClock) -> None:
    # Each synthesis: 0.2 s out to a free thread, 1.0 s on it, 0.1 s back to the service.
    c = eight_processes(clock)
    busy = Observation(ready=0, synthesizing=8, gpu_busy=1, gpu_workers=2, backlog=1000)
    c.decide(busy)
    unmeasured = (c.synthesis_queue(), c._rate_cap_per_s())
    for _ in range(64):
        c.observe_synthesis(1.3, SynthesisParts(compute_s=1.0, back_s=0.1, out_s=0.2))
    clock.advance(0.1)
    c.decide(busy)
    assert unmeasured[0] == 2
    assert unmeasured[1] == pytest.approx((8 + 2) / 1.3)
    # 8 a second for 0.3 s: 2.4 partitions on their way, 3 in the queue for them.
    assert c.synthesis_queue() == 4
    # The cap counts the processes' own second, not the trips: (8 + 2) ÷ 1.0 s.
    assert c._rate_cap_per_s() == pytest.approx(10.0, rel=0.02)
    assert c.synthesis_supply_per_s == pytest.approx(8.0, rel=0.02)


def test_parts_longer_than_the_whole_are_refused_naming_the_rule(clock: FakeClock) -> None:
    c = eight_processes(clock)
    with pytest.raises(ValueError, match="add up to more than the whole"):
        c.observe_synthesis(1.0, SynthesisParts(compute_s=1.0, back_s=0.5))
    with pytest.raises(ValueError, match="at least 0"):
        c.observe_synthesis(1.0, SynthesisParts(compute_s=-1.0, back_s=0.0))
