"""What lifts pi's lead time (`bench.lead_lift`, and the terms the metrics show): the watch
changes nothing, and the parts add up to the lift."""

from __future__ import annotations

import numpy as np
import pytest

from bench.classes import CLASSES, draw
from bench.lead_lift import lifts, mean
from bench.watch import watched_pi
from pacer.config import Settings
from pacer.control.policy import Terms
from pacer.sim.engine import Simulation
from pacer.sim.scenario import load_scenario, scenario_path
from pacer.sim.suite import run_policy


def test_the_watch_changes_nothing_and_the_floor_and_the_check_make_up_the_lift() -> None:
    kind = "heavy-tail"
    scenario = draw(kind, np.random.default_rng([5, CLASSES.index(kind), 0]), 0)
    plain = run_policy(scenario, "pi", Settings())[1]
    seen = lifts(scenario, Settings())
    assert (seen.busy, seen.inflight) == (plain.gpu_busy_ratio, plain.mean_inflight_partitions)
    # Under a heavy tail the oldest syntheses outrun T̂syn now and then: the floor lifts.
    assert 0 < seen.floor_share <= seen.share < 1
    assert seen.floor_lift > 0
    assert seen.floor_share + seen.check_share + seen.cohort_share == pytest.approx(seen.share)
    assert seen.floor_lift + seen.check_lift + seen.cohort_lift == pytest.approx(seen.lift)
    both = mean("two", [seen, seen])
    assert both.host == "two"
    assert both.lift == pytest.approx(seen.lift)


def test_a_run_shorter_than_its_warm_up_is_refused() -> None:
    kind = "heavy-tail"
    scenario = draw(kind, np.random.default_rng([5, CLASSES.index(kind), 0]), 0)
    short = scenario.model_copy(update={"duration_s": 5 * scenario.synthesis.duration_s.mean})
    with pytest.raises(ValueError, match="before its first 10 mean syntheses"):
        lifts(short, Settings())


@pytest.mark.slow
def test_the_terms_say_what_lifts_the_lead_time_after_a_slowdown() -> None:
    # pacer_controller_live_floor_seconds and pacer_controller_slowdown come from these terms.
    scenario = load_scenario(scenario_path("synthesis-slowdown-gpu-bound"))
    at_s = scenario.synthesis.phases[0].at_s
    seen: list[tuple[float, Terms]] = []
    watch = watched_pi(scenario, Settings(), lambda now, pi: seen.append((now, pi.terms)))
    Simulation(scenario, "pi", watch).run()
    before = [t for at, t in seen if at < at_s]
    after = [t for at, t in seen if at_s <= at < at_s + 30]
    assert all(t.slowdown == 1.0 for t in before)
    assert all(t.floor_s <= t.lead_s + 1e-9 for _, t in seen)
    # Synthesis five times slower: the check sees it, and the lead time is that many T̂syn.
    slowed = [t for t in after if t.slowdown > 1.0]
    assert slowed
    assert any(t.lead_s > 2 * before[-1].lead_s for t in slowed)
    # ... and where the floor stands higher than the slowdown's lead time, it sets it.
    assert any(t.floor_s == t.lead_s > before[-1].lead_s for t in after)
