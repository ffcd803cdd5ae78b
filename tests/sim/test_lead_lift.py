"""What lifts pi's lead time (`bench.lead_lift`): the watch changes nothing, and the parts add
up to the lift."""

from __future__ import annotations

import numpy as np
import pytest

from bench.classes import CLASSES, draw
from bench.lead_lift import lifts, mean
from pacer.config import Settings
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
    assert seen.floor_share + seen.check_share == pytest.approx(seen.share)
    assert seen.floor_lift + seen.check_lift == pytest.approx(seen.lift)
    both = mean("two", [seen, seen])
    assert both.host == "two"
    assert both.lift == pytest.approx(seen.lift)


def test_a_run_shorter_than_its_warm_up_is_refused() -> None:
    kind = "heavy-tail"
    scenario = draw(kind, np.random.default_rng([5, CLASSES.index(kind), 0]), 0)
    short = scenario.model_copy(update={"duration_s": 5 * scenario.synthesis.duration_s.mean})
    with pytest.raises(ValueError, match="before its first 10 mean syntheses"):
        lifts(short, Settings())
