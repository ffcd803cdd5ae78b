"""The disturbance scenarios: pi against the best baseline, memory held, recovery.

Each runs every policy on the scenario's shipped seed, fixed at pi's memory among them, and
checks the targets of a host under disturbance (docs/simulating.md, "Targets"): busy ratio at
least the best baseline's less 0.005, mean in flight within 1.15 × Little's law + q*, no more
than 1.05 × what a fixed concurrency as busy holds, busy again within two synthesis lead times
of each disturbance, hung syntheses raising in flight by at most their number, and the
scenario's own targets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pacer.config import Settings
from pacer.sim.scenario import load_scenario, shipped_scenarios
from pacer.sim.suite import check_targets, run_scenario
from tests.sim.test_scenarios import BASE, scenario_params

DISTURBANCES = [p for p in shipped_scenarios() if p.stem not in BASE]
# The disturbances whose runs take longest: checked in the slow tier (docs/testing.md).
SLOW = {
    "wide-host", "cold-start-failure", "synthesis-slowdown-gpu-bound", "worker-dies",
    "gpu-speedup", "hung-syntheses", "synthesis-processes", "warm-start-elsewhere", "h200",
    "synthesis-slower", "gpu-stall", "hung-syntheses-wide", "synthesis-slowdown-wide",
    "hung-syntheses-five", "slow-handoff", "hung-syntheses-few-slots",
}  # fmt: skip
# Targets known to miss on the shipped seed, and why (bench/RESULTS.md has the sweep). Kept
# strict: one that starts to hold fails the test until it is taken off this list.
KNOWN_MISSES: set[tuple[str, str]] = {
    # A quiet host: a fixed concurrency of Little's law + 6 is as busy as pi, whose buffer
    # of 8 (target_ready) is there for the disturbances a fixed concurrency does not survive.
    ("h200", "mean in flight <= 1.05 x a fixed concurrency as busy"),
    # 49.2 against 49.2: the two-size setpoint (D24), within rounding of the target.
    ("mixed-sizes", "mean in flight <= 1.15 x Little + target"),
    # In-progress syntheses slow five-fold at once: until the new lead time is known the GPUs
    # starve a little, and unpaced, holding 160 partitions, has a ready queue to ride it out
    # on. pi recovers within two lead times (D179), but an oracle holding pi's memory is not
    # as busy as unpaced either.
    ("synthesis-slowdown-gpu-bound", "busy ratio >= best baseline - 0.005"),
    # The same on a wide host: 2.5-fold, and 700 partitions for unpaced to ride it out on.
    ("synthesis-slowdown-wide", "busy ratio >= best baseline - 0.005"),
    # On this seed the survival check calls the slowdown 1.5 s sooner, from a snapshot taken
    # before it began, and its first factor comes out 1.75 for 2.5: the refill is short and
    # the return takes 19.4 s for 15.3 (bench/RESULTS.md, "the safety ceiling without a
    # mismatch above the projection").
    ("synthesis-slowdown-wide", "busy again within 2 lead times of t=150 s"),
}
CHECKED = (
    "busy ratio >= best baseline", "mean in flight", "busy again", "GPU busy >=",
    "no re-bootstrap", "hung syntheses",
)  # fmt: skip


def test_the_disturbances_are_shipped() -> None:
    assert {p.stem for p in DISTURBANCES} == {
        "gpu-stall", "gpu-speedup", "synthesis-jump", "mixed-sizes", "one-partition-bursts",
        "synthesis-slower", "worker-dies", "cold-start-failure", "warm-start-elsewhere",
        "wide-host", "h200", "synthesis-slowdown-gpu-bound", "hung-syntheses", "gpu-outage",
        "synthesis-processes", "slow-handoff", "hung-syntheses-wide", "synthesis-slowdown-wide",
        "hung-syntheses-five", "hung-syntheses-few-slots",
    }  # fmt: skip


@pytest.mark.parametrize("path", scenario_params(DISTURBANCES, SLOW))
def test_pi_meets_the_disturbance_targets(path: Path) -> None:
    settings = Settings()
    scenario = load_scenario(path)
    findings = [
        f for f in check_targets(run_scenario(scenario, settings), settings)
        if f.target.startswith(CHECKED)
    ]  # fmt: skip
    assert "busy ratio >= best baseline - 0.005" in {f.target for f in findings}
    if scenario.disturbances():
        assert any(f.target.startswith("busy again") for f in findings)
    if scenario.synthesis.hangs:
        assert any(f.target.startswith("hung syntheses") for f in findings)
    known = {target for name, target in KNOWN_MISSES if name == path.stem}
    failed = [f"{f.target}: {f.detail}" for f in findings if not f.passed and f.target not in known]
    assert not failed, failed
    now_held = [f.target for f in findings if f.passed and f.target in known]
    assert not now_held, f"known misses now hold, take them off KNOWN_MISSES: {now_held}"
