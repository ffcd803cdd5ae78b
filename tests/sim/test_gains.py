"""The knobs act: with a biased model, a larger kp or ki feeds the GPUs more, visibly; with
the model as shipped, a larger ready buffer carries the GPUs through a speed-up.

T̂syn is read as half of itself (``bench.gains.run_pi``), as a lead time measured short
would be: the model then under-dispatches, and only the correction of its prediction error
(kp, ki) makes up for it. Shipped seeds, so the figures are deterministic; bench/gains.py
sweeps the same on six disturbance scenarios (bench/RESULTS.md, "the knobs").
"""

from __future__ import annotations

import itertools

import pytest

from bench.gains import lost_leads, run_pi, simulate_pi
from pacer.config import ControllerSettings, Settings
from pacer.sim.report import Report
from pacer.sim.scenario import load_scenario, shipped_scenarios

BIAS = 0.5


def _run(name: str, **controller: float) -> Report:
    path = next(p for p in shipped_scenarios() if p.stem == name)
    return run_pi(load_scenario(path), Settings(controller=controller), BIAS)


@pytest.mark.parametrize(
    ("knob", "values", "other"),
    [("kp", (0.0, 0.25, 0.5, 1.0), {"ki": 0.0}), ("ki", (0.0, 0.02, 0.05), {"kp": 0.0})],
    ids=["kp", "ki"],
)
def test_a_larger_gain_keeps_the_gpus_busier_and_holds_more(
    knob: str, values: tuple[float, ...], other: dict[str, float]
) -> None:
    reports = [_run("gpu-stall", **{knob: v}, **other) for v in values]
    busy = [r.gpu_busy_ratio for r in reports]
    held = [r.mean_inflight_partitions for r in reports]
    assert all(b - a >= 0.0005 for a, b in itertools.pairwise(busy)), busy
    assert busy[-1] - busy[0] >= 0.05, busy
    assert all(b - a >= 0.5 for a, b in itertools.pairwise(held)), held


def test_without_gains_a_biased_model_never_recovers_from_a_worker_dying() -> None:
    untuned = _run("worker-dies", kp=0.0, ki=0.0)
    tuned = _run("worker-dies", kp=0.0, ki=0.2)
    assert [r.after_s for r in untuned.recoveries] == [None]
    assert all(r.after_s is not None and r.after_s <= 2 * r.lead_s for r in tuned.recoveries)
    assert tuned.gpu_busy_ratio - untuned.gpu_busy_ratio >= 0.2


def test_a_larger_ready_buffer_loses_less_gpu_time_after_a_speed_up_and_holds_more() -> None:
    # The model as shipped: the buffer, not the gains, is what carries the GPUs through a
    # speed-up until the shortfall dispatched on seeing it arrives, a lead time later.
    scenario = load_scenario(next(p for p in shipped_scenarios() if p.stem == "gpu-speedup"))
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
