"""The synthesis processes' occupancy: syntheses in flight against processes busy."""

from __future__ import annotations

import math

import pytest

from pacer.control.occupancy import Occupancy


def test_with_no_queue_every_synthesis_in_flight_is_in_a_process() -> None:
    o = Occupancy()
    for t, n in enumerate([3, 5, 8, 2, 8]):
        o.observe(float(t), synthesizing=n, processes=8, tau_s=4.0)
    assert o.busy_share == 1.0


def test_nothing_in_flight_yet_reads_as_every_synthesis_in_a_process() -> None:
    o = Occupancy()
    assert o.busy_share == 1.0
    o.observe(0.0, synthesizing=0, processes=8, tau_s=4.0)
    o.observe(1.0, synthesizing=0, processes=8, tau_s=4.0)
    assert o.busy_share == 1.0


def test_each_count_is_held_until_the_next_and_weighed_by_its_time() -> None:
    # 12 in flight (8 busy) for the first second, 8 (8 busy) until t = 1 + tau: the weights
    # of the two stretches are e^-1 and 1 - e^-1.
    o = Occupancy()
    o.observe(0.0, synthesizing=12, processes=8, tau_s=3.0)
    o.observe(1.0, synthesizing=8, processes=8, tau_s=3.0)
    o.observe(4.0, synthesizing=8, processes=8, tau_s=3.0)
    old = math.exp(-1.0)
    assert o.busy_share == pytest.approx(8 / (12 * old + 8 * (1 - old)))


def test_the_averages_forget_an_old_queue() -> None:
    o = Occupancy()
    o.observe(0.0, synthesizing=20, processes=10, tau_s=2.0)
    o.observe(1.0, synthesizing=10, processes=10, tau_s=2.0)
    assert o.busy_share < 0.9
    o.observe(41.0, synthesizing=10, processes=10, tau_s=2.0)
    assert o.busy_share == pytest.approx(1.0)


def test_a_negative_count_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="at least 0"):
        Occupancy().observe(0.0, synthesizing=-1, processes=4, tau_s=1.0)
