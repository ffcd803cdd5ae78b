"""How long the live floor remembers the oldest syntheses' excursions (`live_floor_longest`)."""

from __future__ import annotations

import pytest

from pacer.config import ControllerSettings
from pacer.control.estimates import Estimates, Estimator
from pacer.control.live_floor import LiveFloor
from pacer.control.pacing import Pacing
from pacer.control.policy import Observation

STEADY = (12.0, 11.5, 11.2, 11.0, 10.5)  # the 4th oldest 1 s past a 10 s estimate
CLUSTER = tuple(a + 19.0 for a in STEADY)  # stragglers together: the 4th oldest 20 s past


def floor_after_a_quiet_spell(history_longest: float) -> float:
    """The floor when a cluster of stragglers comes back 100 s (ten lead times) after the
    last one, the longest synthesis seen 60 s: the heavy tail of a host that did not change."""
    floor = LiveFloor(history_longest)
    for t in range(0, 40):
        floor.update(float(t), STEADY, 10.0, 10.0, longest_s=60.0)
    for t in range(40, 50):
        floor.update(float(t), CLUSTER, 10.0, 10.0, longest_s=60.0)
    for t in range(50, 150):
        floor.update(float(t), STEADY, 10.0, 10.0, longest_s=60.0)
    floor.update(150.0, tuple(a - 2.0 for a in CLUSTER), 10.0, 10.0, longest_s=60.0)
    return floor.value_s


def test_a_history_of_four_longest_syntheses_remembers_the_last_cluster() -> None:
    # Eight lead times (80 s) forget the cluster of 40 s to 50 s: the next one lifts the
    # floor to its age less the 1 s margin of the quiet spell.
    assert floor_after_a_quiet_spell(0.0) == pytest.approx(28.0 - 1.0)
    # Four of the longest (240 s) remember its 20 s: the next one, 2 s younger, stays under.
    assert floor_after_a_quiet_spell(4.0) == pytest.approx(28.0 - 20.0)


def test_narrow_syntheses_keep_the_eight_lead_times() -> None:
    # The longest 15 s: four of them are 60 s, less than eight lead times, which then hold.
    floor = LiveFloor(4.0)
    for t in range(0, 110):
        ages = CLUSTER if 10 <= t < 20 else STEADY
        floor.update(float(t), ages, 10.0, 10.0, longest_s=15.0)
    floor.update(110.0, CLUSTER, 10.0, 10.0, longest_s=15.0)
    assert floor.value_s == pytest.approx(30.0 - 1.0)  # the cluster of 10 s to 20 s forgotten


def test_the_setting_reaches_the_floor_and_a_retune_moves_it() -> None:
    est = Estimator(64, 64, Estimates(2.0, 30.0))
    pacing = Pacing(ControllerSettings(live_floor_longest=4.0), est)
    assert est.floor_longest == 4.0
    obs = Observation(ready=0, synthesizing=30, gpu_busy=2, gpu_workers=2, backlog=100)
    terms = pacing.terms(obs, workers=2, lead_s=30.0, hung=0)
    pacing.retune(ControllerSettings(), terms, keep=True)
    assert est.floor_longest == 0.0


def test_the_setting_has_bounds() -> None:
    with pytest.raises(ValueError, match="live_floor_longest"):
        ControllerSettings(live_floor_longest=-1.0)
    with pytest.raises(ValueError, match="live_floor_longest"):
        ControllerSettings(live_floor_longest=21.0)


def test_the_floor_is_never_below_zero() -> None:
    # A cluster of stragglers 20 s past T̂syn is remembered; then the oldest running are all
    # young (a burst after a pause): their age less that margin is below zero, and a floor
    # there lifts nothing, so it reads 0 (the metric and /v1/controller show it).
    floor = LiveFloor(4.0)
    for t in range(0, 40):
        floor.update(float(t), CLUSTER, 10.0, 10.0, longest_s=60.0)
    young = (6.0, 5.5, 5.2, 5.0, 4.5)
    for t in range(40, 80):
        floor.update(float(t), young, 10.0, 10.0, longest_s=60.0)
        assert floor.value_s == 0.0
