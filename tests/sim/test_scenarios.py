"""One test per base scenario: pacer's controller meets its targets there against every
baseline (but for the misses bench/RESULTS.md reports); the checks that cannot fail are not
counted; the cuzk baseline does not collapse where a partition's trip is shorter than its
bootstrap spacing.

The disturbance scenarios (a stall, a dead worker, ...) have theirs in test_disturbances.py.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from pacer.config import Settings
from pacer.control.baselines import CuzkPacer
from pacer.sim.engine import Simulation
from pacer.sim.report import Report, summarize
from pacer.sim.scenario import load_scenario, shipped_scenarios
from pacer.sim.suite import check_targets, run_policy, run_scenario

BASE = {
    "steady-backlog", "cold-start", "gpu-slowdown", "bursty-arrivals", "cpu-contended",
    "memory-bound", "two-gpus", "short-trip", "heavy-tail", "bimodal-partitions",
    "cold-start-fast-synthesis",
}  # fmt: skip
SCENARIOS = [p for p in shipped_scenarios() if p.stem in BASE]
# The scenarios whose runs of every policy take longest: checked in the slow tier, so that the
# fast one keeps to its minute (docs/testing.md, "Test tiers").
SLOW = {"cold-start", "two-gpus", "short-trip", "heavy-tail", "bimodal-partitions", "memory-bound"}


def scenario_params(paths: list[Path], slow: set[str]) -> list[object]:
    """One parameter per scenario, named by its file; those in ``slow`` marked slow."""
    return [
        pytest.param(p, id=p.stem, marks=pytest.mark.slow if p.stem in slow else ()) for p in paths
    ]


@functools.cache
def reports_of(path: Path) -> list[Report]:
    """Every policy on the scenario at ``path`` with the default settings, run once a module."""
    return run_scenario(load_scenario(path), Settings())


# Targets pi misses on the shipped seeds, each explained in bench/RESULTS.md. The test fails
# when one is met again, so that the results and this list are brought up to date.
KNOWN_MISSES: set[tuple[str, str]] = {
    # The setpoint grows with the spread of partition sizes (D24) past target_ready, which
    # is all the Little target allows for; pi is as busy as a fixed concurrency its size.
    ("bimodal-partitions", "mean in flight <= 1.15 x Little + target"),
}


def test_suite_has_the_required_scenarios() -> None:
    assert {p.stem for p in SCENARIOS} == BASE


@pytest.mark.parametrize("path", scenario_params(SCENARIOS, SLOW))
def test_pi_meets_targets(path: Path) -> None:
    settings = Settings()
    scenario = load_scenario(path)
    findings = check_targets(reports_of(path), settings)
    assert "busy ratio >= best baseline - 0.005" in {f.target for f in findings}
    failed = {(f.scenario, f.target): f.detail for f in findings if not f.passed}
    known = {key for key in KNOWN_MISSES if key[0] == scenario.name}
    assert set(failed) == known, failed


def test_steady_backlog_applies_the_gpu_bound_targets_and_no_check_that_cannot_fail() -> None:
    settings = Settings()
    reports = reports_of(next(p for p in SCENARIOS if p.stem == "steady-backlog"))
    targets = {f.target for f in check_targets(reports, settings)}
    assert "steady GPU busy >= min(0.995, best baseline - 0.005)" in targets
    assert "mean in flight <= 1.15 x Little + target" in targets
    assert "mean in flight <= 1.05 x a fixed concurrency as busy" in targets
    # pi asks only for what the budget admits, and unpaced holds the whole budget on a
    # backlog: neither check can fail, so neither counts.
    assert not any("budget" in t or "unpaced" in t for t in targets)
    assert {r.policy for r in reports} >= {"pi", "unpaced", "cuzk", "cuzk-default", "fixed"}
    assert any(r.policy.startswith("fixed@") for r in reports)


def short_trip() -> Path:
    return next(p for p in SCENARIOS if p.stem == "short-trip")


@pytest.mark.parametrize(
    "max_parallel",
    [
        pytest.param(None, id="host", marks=pytest.mark.slow),
        pytest.param(18, id="shipped-18", marks=pytest.mark.slow),
    ],
)
def test_cuzk_keeps_a_short_trip_pipeline_busy(max_parallel: int | None) -> None:
    scenario = load_scenario(short_trip())
    trip_s = scenario.synthesis.duration_s.mean + scenario.gpu.service_s.mean
    assert trip_s < CuzkPacer.BOOTSTRAP_MIN_SPACING_S  # the case a re-bootstrap would starve
    pi = run_policy(scenario, "pi", Settings())[1]
    if max_parallel is None:
        cuzk = run_policy(scenario, "cuzk", Settings())[1]
    else:
        raw = Simulation(
            scenario,
            "cuzk",
            lambda c: CuzkPacer(scenario.memory_slots, c, max_parallel_synthesis=18),
        ).run()
        cuzk = summarize(raw)
    assert cuzk.gpu_busy_ratio >= 0.9 * pi.gpu_busy_ratio, (cuzk.gpu_busy_ratio, pi.gpu_busy_ratio)
    assert cuzk.throughput_partitions_per_s > 12


def test_cuzk_default_keeps_at_most_its_workers_and_channel_in_synthesis() -> None:
    scenario = load_scenario(next(p for p in SCENARIOS if p.stem == "cpu-contended"))
    raw, report = run_policy(scenario, "cuzk-default", Settings())
    workers = CuzkPacer.MAX_PARALLEL_SYNTHESIS  # as shipped: 18, whatever the host
    assert max(raw.trace.synthesizing) == 2 * workers
    assert report.peak_inflight_partitions < scenario.memory_slots
    unpaced = run_policy(scenario, "unpaced", Settings())[1]
    assert unpaced.peak_inflight_partitions == scenario.memory_slots
