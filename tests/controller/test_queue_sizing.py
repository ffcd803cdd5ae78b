"""The queue pi keeps in front of the synthesis processes: its size, and dispatch up to it."""

from __future__ import annotations

import pytest

from pacer.config import ControllerSettings
from pacer.control.controller import PIController
from pacer.control.estimates import Estimates
from pacer.control.policy import Caps, Observation
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
