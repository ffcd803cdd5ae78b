"""One test per base scenario: pacer's controller meets its targets there, against cuzk.

The disturbance scenarios (a stall, a dead worker, ...) have theirs in test_disturbances.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pacer.config import Settings
from pacer.sim.scenario import load_scenario, shipped_scenarios
from pacer.sim.suite import check_targets, run_policy

BASE = {
    "steady-backlog", "cold-start", "gpu-slowdown", "bursty-arrivals", "cpu-contended",
    "memory-bound", "two-gpus",
}  # fmt: skip
SCENARIOS = [p for p in shipped_scenarios() if p.stem in BASE]


def test_suite_has_the_required_scenarios() -> None:
    assert {p.stem for p in SCENARIOS} == BASE


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_pi_meets_targets(path: Path) -> None:
    settings = Settings()
    scenario = load_scenario(path)
    reports = [run_policy(scenario, policy, settings)[1] for policy in ("pi", "cuzk")]
    findings = check_targets(reports, settings)
    assert findings, "no target applies: the check itself is broken"
    failed = [f"{f.target}: {f.detail}" for f in findings if not f.passed]
    assert not failed, failed


def test_steady_backlog_applies_the_gpu_bound_targets() -> None:
    settings = Settings()
    scenario = load_scenario(next(p for p in SCENARIOS if p.stem == "steady-backlog"))
    findings = check_targets([run_policy(scenario, "pi", settings)[1]], settings)
    targets = {f.target for f in findings}
    assert "steady GPU busy >= 0.995" in targets
    assert "peak in flight <= 1.15 x Little + target" in targets
