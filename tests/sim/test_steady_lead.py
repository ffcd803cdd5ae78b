"""pi with its lead time held steady (`bench.steady_lead`): the watch changes nothing, and the
hold takes effect."""

from __future__ import annotations

import numpy as np
import pytest

from bench.classes import CLASSES, draw
from bench.steady_lead import pi_arm
from pacer.config import Settings
from pacer.sim.suite import run_policy


@pytest.mark.slow
def test_watching_pi_changes_nothing_and_holding_its_lead_time_holds_it() -> None:
    kind = "heavy-tail"
    scenario = draw(kind, np.random.default_rng([5, CLASSES.index(kind), 0]), 0)
    settings = Settings()
    plain = run_policy(scenario, "pi", settings)[1]
    watched, mean_lead = pi_arm(scenario, settings, None)
    assert watched == plain
    assert mean_lead > 0
    held_s = 1.5 * mean_lead
    held, lead_then = pi_arm(scenario, settings, held_s)
    assert abs(lead_then - held_s) < 1e-9 * held_s  # every decision after the warm-up used it
    # A longer lead time sinks more into the projection: more is dispatched ahead.
    assert held.mean_inflight_partitions > plain.mean_inflight_partitions
