"""When pi's terms first show a GPU-bound slowdown (`bench.slowdown_bound --called`): the watch
changes nothing, and the call comes after the change, within a few of the old lead times."""

from __future__ import annotations

import pytest

from bench.slowdown_bound import _called
from pacer.config import Settings
from pacer.sim.engine import Simulation
from pacer.sim.report import summarize
from pacer.sim.scenario import load_scenario, scenario_path
from pacer.sim.suite import run_policy


@pytest.mark.slow
def test_the_call_comes_after_the_change_and_the_watch_changes_nothing() -> None:
    scenario = load_scenario(scenario_path("synthesis-slowdown-gpu-bound"))
    calls: list[float | None] = []
    watched = summarize(
        Simulation(scenario, "pi", _called(scenario, settings=Settings(), calls=calls)).run()
    )
    plain = run_policy(scenario, "pi", Settings())[1]
    assert (watched.gpu_busy_ratio, watched.mean_inflight_partitions) == (
        plain.gpu_busy_ratio,
        plain.mean_inflight_partitions,
    )
    old_lead = scenario.synthesis.duration_s.mean
    assert len(calls) == 1
    assert calls[0] is not None
    # Nothing tells of the change before it; a fivefold slowdown shows within two old leads.
    assert 0 < calls[0] <= 2 * old_lead


def test_a_steady_host_is_never_called_slow() -> None:
    scenario = load_scenario(scenario_path("synthesis-slowdown-gpu-bound"))
    phases = tuple(p.model_copy(update={"scale": 1.0}) for p in scenario.synthesis.phases)
    synthesis = scenario.synthesis.model_copy(update={"phases": phases})
    steady = scenario.model_copy(update={"synthesis": synthesis, "duration_s": 300.0})
    calls: list[float | None] = []
    Simulation(steady, "pi", _called(steady, settings=Settings(), calls=calls)).run()
    assert calls == [None]
