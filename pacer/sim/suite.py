"""Running scenarios under policies, and the targets pacer's controller must meet."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pacer.config import Settings
from pacer.sim.engine import RawRun, Simulation
from pacer.sim.policies import POLICIES, policy_factory
from pacer.sim.report import Report, summarize
from pacer.sim.scenario import Scenario, load_scenario, shipped_scenarios

# Targets (docs/simulating.md, "Targets").
THROUGHPUT_VS_BOUND = 0.97
STEADY_BUSY_GPU_BOUND = 0.995
MEAN_LITTLE_FACTOR = 1.15
BUSY_VS_BEST_BASELINE = 0.005  # pi's busy ratio may trail the best baseline's by this much
RECOVERY_LEADS = 2.0  # back to busy within this many synthesis lead times of a disturbance
INFLIGHT_VS_FIXED = 1.05  # pi holds at most this × what a fixed concurrency as busy holds
BASELINES = ("unpaced", "cuzk", "cuzk-default", "fixed")
UNHUNG = "pi, no hangs"  # pi on the scenario without its hung syntheses


def run_policy(
    scenario: Scenario, policy: str, settings: Settings, concurrency: int | None = None
) -> tuple[RawRun, Report]:
    """Simulate one policy on one scenario; ``fixed`` at a ``concurrency`` given is reported
    as ``fixed@N``."""
    label = policy if concurrency is None or policy != "fixed" else f"fixed@{concurrency}"
    raw = Simulation(scenario, label, policy_factory(policy, scenario, settings, concurrency)).run()
    return raw, summarize(raw)


def fixed_beside(pi: Report, scenario: Scenario) -> tuple[int, int]:
    """The fixed concurrencies pi is held to: the most it holds no more memory than pi
    (floor of pi's mean in flight), and the most that holds less than pi ÷
    ``INFLIGHT_VS_FIXED`` (if that one is as busy as pi, pi holds too much for its busy
    ratio: fixed's busy ratio does not fall as its concurrency rises, within the cores)."""
    slots = scenario.memory_slots
    equal = max(1, min(slots, math.floor(pi.mean_inflight_partitions)))
    less = max(1, min(slots, math.ceil(pi.mean_inflight_partitions / INFLIGHT_VS_FIXED) - 1))
    return equal, less


def run_scenario(
    scenario: Scenario, settings: Settings, policies: Sequence[str] = POLICIES
) -> list[Report]:
    """Every policy on one scenario; with pi and fixed, also fixed at pi's memory and at
    ``INFLIGHT_VS_FIXED`` less (``fixed_beside``); where the scenario has hung syntheses,
    also pi without them (``UNHUNG``)."""
    reports = [run_policy(scenario, policy, settings)[1] for policy in policies]
    pi = next((r for r in reports if r.policy == "pi"), None)
    if pi is None:
        return reports
    if "fixed" in policies:
        for n in sorted(set(fixed_beside(pi, scenario))):
            reports.append(run_policy(scenario, "fixed", settings, n)[1])
    if scenario.synthesis.hangs:
        unhung = scenario.model_copy(
            update={"synthesis": scenario.synthesis.model_copy(update={"hangs": ()})}
        )
        raw = Simulation(unhung, UNHUNG, policy_factory("pi", unhung, settings)).run()
        reports.append(summarize(raw))
    return reports


def run_suite(
    settings: Settings,
    paths: Iterable[Path] | None = None,
    policies: Sequence[str] = POLICIES,
    progress: Callable[[int, int, Sequence[Report]], None] | None = None,
    reseed: int = 0,
) -> list[Report]:
    """Every scenario (default: the shipped suite) under every policy (``run_scenario``), in
    order; ``progress`` hears of each scenario's runs as they end.

    ``reseed`` k > 0 replaces each scenario's seed by seed + 101·k: the same workload with
    other random draws, to see whether a result holds beyond one sample.
    """
    scenarios = [load_scenario(p) for p in (shipped_scenarios() if paths is None else paths)]
    if reseed:
        scenarios = [sc.model_copy(update={"seed": sc.seed + 101 * reseed}) for sc in scenarios]
    reports: list[Report] = []
    for i, scenario in enumerate(scenarios):
        runs = run_scenario(scenario, settings, policies)
        reports += runs
        if progress is not None:
            progress(i + 1, len(scenarios), runs)
    return reports


@dataclass(frozen=True)
class Finding:
    """One target checked on one scenario."""

    scenario: str
    target: str
    passed: bool
    detail: str


def check_targets(reports: Sequence[Report], settings: Settings) -> list[Finding]:
    """Check the ``pi`` policy of each scenario against its targets (the suite's and the
    scenario's own) and against the baselines that ran beside it. Only checks that can fail
    count: none on budget violations (pi asks only for what the budget admits, and the
    simulator refuses the rest), none on memory where memory bounds or against an
    ``unpaced`` that held the whole budget throughout (no policy can hold more)."""
    by_scenario: dict[str, list[Report]] = {}
    for r in reports:
        by_scenario.setdefault(r.scenario, []).append(r)
    findings = []
    target_ready = settings.controller.target_ready
    for name, runs in by_scenario.items():
        pi = next((r for r in runs if r.policy == "pi"), None)
        if pi is None:
            continue
        baselines = [r for r in runs if r.policy.split("@")[0] in BASELINES]
        scenario_findings = _scenario_targets(pi, target_ready)
        scenario_findings += _versus_baselines(pi, baselines)
        scenario_findings += _versus_fixed(pi, [r for r in runs if r.policy.startswith("fixed@")])
        scenario_findings += _steady_busy(pi, baselines)
        unhung = next((r for r in runs if r.policy == UNHUNG), None)
        if unhung is not None:
            scenario_findings.append(_hangs(pi, unhung))
        low = pi.target_gpu_busy_min
        if low is not None:
            scenario_findings.append(
                Finding(name, f"GPU busy >= {low}", pi.gpu_busy_ratio >= low,
                        f"{pi.gpu_busy_ratio:.4f}")
            )  # fmt: skip
        findings += scenario_findings
    return findings


def _scenario_targets(pi: Report, target_ready: float) -> list[Finding]:
    out = []

    def add(target: str, passed: bool, detail: str) -> None:
        out.append(Finding(pi.scenario, target, passed, detail))

    # Hung syntheses hold their memory whatever the policy: none of it is Little's.
    mean_limit = MEAN_LITTLE_FACTOR * pi.little_min_inflight + target_ready + pi.hung_syntheses
    add(
        f"mean in flight <= {MEAN_LITTLE_FACTOR} x Little + target",
        pi.mean_inflight_partitions <= mean_limit,
        f"{pi.mean_inflight_partitions:.1f} <= {mean_limit:.1f}",
    )
    for rec in pi.recoveries:
        limit = RECOVERY_LEADS * rec.lead_s
        add(
            f"busy again within {RECOVERY_LEADS:g} lead times of t={rec.at_s:g} s",
            rec.after_s is not None and rec.after_s <= limit,
            f"{_seconds(rec.after_s)} <= {limit:.1f} s",
        )
    if pi.backlog:
        ratio = pi.throughput_partitions_per_s / pi.bound_throughput_partitions_per_s
        add(
            f"throughput >= {THROUGHPUT_VS_BOUND} x bound",
            ratio >= THROUGHPUT_VS_BOUND,
            f"{ratio:.4f} of the {pi.bottleneck} bound",
        )
        # A warm start is one refill (from the saved estimates); anything more is a drain.
        allowed = 1 if pi.warm_start else 0
        add("no re-bootstrap in a backlog", pi.rebootstraps <= allowed, f"{pi.rebootstraps}")
    return out


def _steady_busy(pi: Report, baselines: Sequence[Report]) -> list[Finding]:
    """Where the GPUs bound throughout a backlog: steady GPU busy >= 0.995, or, where no
    baseline reaches that (partitions of several sizes: the memory budget binds during runs
    of small ones, and ``unpaced``, holding all of it, stays below), as busy as the best
    baseline less ``BUSY_VS_BEST_BASELINE``."""
    if not (pi.backlog and pi.gpu_bound_share >= 0.999):
        return []
    best = max((r.steady_gpu_busy_ratio for r in baselines), default=STEADY_BUSY_GPU_BOUND)
    limit = min(STEADY_BUSY_GPU_BOUND, best - BUSY_VS_BEST_BASELINE)
    return [
        Finding(
            pi.scenario,
            f"steady GPU busy >= min({STEADY_BUSY_GPU_BOUND}, best baseline - "
            f"{BUSY_VS_BEST_BASELINE})",
            pi.steady_gpu_busy_ratio >= limit,
            f"{pi.steady_gpu_busy_ratio:.4f} >= {limit:.4f}",
        )
    ]


def _versus_baselines(pi: Report, baselines: Sequence[Report]) -> list[Finding]:
    """Busy ratio at least the best baseline's (fixed at pi's memory among them) less
    ``BUSY_VS_BEST_BASELINE``; mean in flight no more than unpaced's where unpaced did not
    hold the whole budget throughout."""
    out = []
    if baselines:
        best = max(baselines, key=lambda r: r.gpu_busy_ratio)
        out.append(
            Finding(
                pi.scenario,
                f"busy ratio >= best baseline - {BUSY_VS_BEST_BASELINE}",
                pi.gpu_busy_ratio >= best.gpu_busy_ratio - BUSY_VS_BEST_BASELINE,
                f"{pi.gpu_busy_ratio:.4f} vs {best.gpu_busy_ratio:.4f} ({best.policy})",
            )
        )
    unpaced = next((r for r in baselines if r.policy == "unpaced"), None)
    full = unpaced is not None and unpaced.mean_inflight_partitions >= unpaced.memory_slots - 0.5
    if unpaced is not None and not full and pi.bottleneck != "memory":
        out.append(
            Finding(
                pi.scenario,
                "mean in flight <= unpaced",
                pi.mean_inflight_partitions <= unpaced.mean_inflight_partitions,
                f"{pi.mean_inflight_partitions:.1f} vs {unpaced.mean_inflight_partitions:.1f}",
            )
        )
    return out


def _versus_fixed(pi: Report, fixed: Sequence[Report]) -> list[Finding]:
    """No fixed concurrency that holds less than pi ÷ ``INFLIGHT_VS_FIXED`` is as busy as
    pi (where memory does not bound: there every policy holds all of it)."""
    if pi.bottleneck == "memory":
        return []
    limit = pi.mean_inflight_partitions / INFLIGHT_VS_FIXED
    less = [r for r in fixed if r.mean_inflight_partitions < limit]
    if not less:
        return []
    best = max(less, key=lambda r: r.gpu_busy_ratio)
    return [
        Finding(
            pi.scenario,
            f"mean in flight <= {INFLIGHT_VS_FIXED} x a fixed concurrency as busy",
            best.gpu_busy_ratio < pi.gpu_busy_ratio,
            f"{best.policy} ({best.mean_inflight_partitions:.1f} in flight): busy "
            f"{best.gpu_busy_ratio:.4f} vs pi {pi.gpu_busy_ratio:.4f} "
            f"({pi.mean_inflight_partitions:.1f})",
        )
    ]


def _hangs(pi: Report, unhung: Report) -> Finding:
    """Hung syntheses raise pi's mean in flight by at most their number."""
    hangs = pi.hung_syntheses
    raised = pi.mean_inflight_partitions - unhung.mean_inflight_partitions
    return Finding(
        pi.scenario,
        "hung syntheses raise mean in flight by at most their number",
        raised <= hangs,
        f"+{raised:.1f} for {hangs} hung",
    )


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"
