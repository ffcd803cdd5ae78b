"""The disturbance scenarios: pi against the best baseline, memory held, recovery.

Each runs pi, unpaced, cuzk and fixed on the scenario's shipped seed and checks the targets
of a host under disturbance (README "Targets"): busy ratio at least the best baseline's less
0.005, no budget violation, mean in flight within 1.15 × Little's law + q* and below
unpaced's where memory does not bound, busy again within two synthesis lead times of each
disturbance, and the scenario's own targets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pacer.config import Settings
from pacer.sim.policies import POLICIES
from pacer.sim.scenario import load_scenario, shipped_scenarios
from pacer.sim.suite import check_targets, run_policy
from tests.sim.test_scenarios import BASE

DISTURBANCES = [p for p in shipped_scenarios() if p.stem not in BASE]
# Targets known to miss on the shipped seed, and why (bench/RESULTS.md has the sweep). Kept
# strict: one that starts to hold fails the test until it is taken off this list.
KNOWN_MISSES: set[tuple[str, str]] = set()
CHECKED = (
    "no budget violations", "busy ratio >= best baseline", "mean in flight", "busy again",
    "GPU busy >=", "no re-bootstrap",
)  # fmt: skip


def test_the_disturbances_are_shipped() -> None:
    assert {p.stem for p in DISTURBANCES} == {
        "gpu-stall", "gpu-speedup", "synthesis-jump", "mixed-sizes", "one-partition-bursts",
        "synthesis-slower", "worker-dies", "cold-start-failure", "warm-start-elsewhere",
        "wide-host", "h200",
    }  # fmt: skip


@pytest.mark.parametrize("path", DISTURBANCES, ids=[p.stem for p in DISTURBANCES])
def test_pi_meets_the_disturbance_targets(path: Path) -> None:
    settings = Settings()
    scenario = load_scenario(path)
    reports = [run_policy(scenario, policy, settings)[1] for policy in POLICIES]
    findings = [f for f in check_targets(reports, settings) if f.target.startswith(CHECKED)]
    assert {"busy ratio >= best baseline - 0.005", "no budget violations"} <= {
        f.target for f in findings
    }
    if scenario.disturbances():
        assert any(f.target.startswith("busy again") for f in findings)
    known = {target for name, target in KNOWN_MISSES if name == path.stem}
    failed = [f"{f.target}: {f.detail}" for f in findings if not f.passed and f.target not in known]
    assert not failed, failed
    now_held = [f.target for f in findings if f.passed and f.target in known]
    assert not now_held, f"known misses now hold, take them off KNOWN_MISSES: {now_held}"
