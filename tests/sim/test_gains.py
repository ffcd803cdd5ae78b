"""The knobs act, on the model as shipped (no bias injected): kp refills a shortfall sooner
and holds more for the noise of the estimates; ki brings the ready depth observed to the
setpoint, trimming what the model's own projection holds above it; a larger ready buffer
carries the GPUs through a speed-up.

Shipped seeds, so the figures are deterministic; bench/gains.py sweeps the same knobs on ten
seeds of the disturbed and the heavy-tailed hosts (bench/RESULTS.md, "the gains").
"""

from __future__ import annotations

import functools
import itertools
import statistics

import pytest

from bench.gains import lost_leads, simulate_pi
from pacer.config import ControllerSettings, Settings
from pacer.sim.report import Report
from pacer.sim.scenario import load_scenario, scenario_path
from pacer.sim.suite import run_policy


def _run(name: str, k: int = 0, **controller: float) -> Report:
    return _run_once(name, ControllerSettings(**controller).model_dump_json(), k)


@functools.cache
def _run_once(name: str, controller: str, k: int = 0) -> Report:
    """pi on the shipped scenario ``name`` at its seed + 101·k (the suite's sweep), its
    controller settings as JSON: the same run asked for by two tests (the shipped gains) is
    simulated once."""
    scenario = load_scenario(scenario_path(name))
    scenario = scenario.model_copy(update={"seed": scenario.seed + 101 * k})
    settings = Settings(controller=ControllerSettings.model_validate_json(controller))
    return run_policy(scenario, "pi", settings)[1]


SEEDS = 3  # one seed's runs differ by about as much as a knob's effect on a heavy tail


def _mean(name: str, measure: str, **controller: float) -> float:
    """``measure`` of pi's report on ``name``, the mean over ``SEEDS`` seeds."""
    return statistics.fmean(getattr(_run(name, k, **controller), measure) for k in range(SEEDS))


# The sweeps of the longest scenarios run in the slow tier (docs/testing.md, "Test tiers").
SLOW = pytest.mark.slow


def _falls(values: list[float], by: float) -> None:
    """Each value below the one before, the last below the first by ``by`` of it."""
    assert all(b < a for a, b in itertools.pairwise(values)), values
    assert values[-1] <= (1 - by) * values[0], values


def _rises(values: list[float], by: float) -> None:
    assert all(b > a for a, b in itertools.pairwise(values)), values
    assert values[-1] >= (1 + by) * values[0], values


KP = (2.0, 4.0, 8.0)  # docs/controller.md, "Tuning": the safe range of kp, 2 to 8
KI = (0.0, 0.1, 0.25)  # ... and of ki, 0 to 0.25


@SLOW
@pytest.mark.parametrize(
    ("name", "at_s", "hold"), [("gpu-outage", 1500.0, 2.0), ("gpu-slowdown", 2100.0, 100.0)]
)
def test_a_larger_kp_refills_sooner_once_the_gpus_take_more(
    name: str, at_s: float, hold: float
) -> None:
    # A GPU back from an outage longer than the hold of its pipeline (two lead times: by
    # default it is kept, and nothing is short on its return), a GPU back to full speed: what
    # is in flight falls short by a lead time of the added consumption, and kp is how fast it
    # is sent.
    reports = [_run(name, kp=kp, lost_gpu_hold_leads=hold) for kp in KP]
    recovery = [next(r.after_s for r in rep.recoveries if r.at_s == at_s) for rep in reports]
    assert None not in recovery
    _falls([float(x) for x in recovery if x is not None], by=0.03)
    busy = [r.gpu_busy_ratio for r in reports]
    assert all(b >= a for a, b in itertools.pairwise(busy)), busy


@SLOW
def test_a_larger_kp_holds_more_for_a_heavy_tail() -> None:
    # Synthesis times of a heavy tail move the projection back and forth; a larger kp
    # follows each dip sooner, and what it sent stays in flight when the projection rises.
    _rises([_mean("heavy-tail", "mean_inflight_partitions", kp=kp) for kp in KP], by=0.02)


@pytest.mark.parametrize(
    "name", [pytest.param("heavy-tail", marks=SLOW), pytest.param("bimodal-partitions", marks=SLOW)]
)
def test_a_larger_ki_brings_the_ready_depth_observed_down_to_the_setpoint(name: str) -> None:
    # With a wide spread the ready queue, which cannot go below zero, averages above what
    # the projection expects; ki removes that excess in flight, and a little busy time.
    _falls([_mean(name, "mean_inflight_partitions", ki=ki) for ki in KI], by=0.02)
    busy = dict(zip(KI, (_mean(name, "gpu_busy_ratio", ki=ki) for ki in KI), strict=True))
    assert busy[ControllerSettings().ki] >= busy[0.0] - 0.002


@SLOW
def test_a_larger_ready_buffer_loses_less_gpu_time_after_a_speed_up_and_holds_more() -> None:
    # The buffer, not the gains, is what carries the GPUs through a speed-up until the
    # shortfall dispatched on seeing it arrives, a lead time later.
    scenario = load_scenario(scenario_path("gpu-speedup"))
    lead_s = scenario.synthesis.duration_s.mean
    lost, held = [], []
    for share in (0.0, 0.5, 1.0):
        controller = ControllerSettings(target_ready=1, target_ready_s=share * lead_s)
        raw, report = simulate_pi(scenario, Settings(controller=controller))
        lost.append(sum(lost_leads(raw, report)))
        held.append(report.mean_inflight_partitions)
    assert all(b < a for a, b in itertools.pairwise(lost)), lost
    assert lost[-1] <= 0.25 * lost[0], lost
    assert all(b - a >= 1.0 for a, b in itertools.pairwise(held)), held
