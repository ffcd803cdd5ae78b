"""Running scenarios under policies, and the targets pacer's controller must meet."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pacer.config import Settings
from pacer.sim.engine import RawRun, Simulation
from pacer.sim.policies import POLICIES, policy_factory
from pacer.sim.report import Report, summarize
from pacer.sim.scenario import Scenario, load_scenario, shipped_scenarios

# Targets (README "Targets", under "Simulating").
THROUGHPUT_VS_BOUND = 0.97
STEADY_BUSY_GPU_BOUND = 0.995
MEAN_LITTLE_FACTOR = 1.15
BUSY_VS_BEST_BASELINE = 0.005  # pi's busy ratio may trail the best baseline's by this much
RECOVERY_LEADS = 2.0  # back to busy within this many synthesis lead times of a disturbance
BASELINES = ("unpaced", "cuzk", "cuzk-default", "fixed")


def run_policy(
    scenario: Scenario, policy: str, settings: Settings, concurrency: int | None = None
) -> tuple[RawRun, Report]:
    """Simulate one policy on one scenario."""
    raw = Simulation(
        scenario, policy, policy_factory(policy, scenario, settings, concurrency)
    ).run()
    return raw, summarize(raw)


def run_suite(
    settings: Settings,
    paths: Iterable[Path] | None = None,
    policies: Sequence[str] = POLICIES,
    progress: Callable[[int, int, Report], None] | None = None,
    reseed: int = 0,
) -> list[Report]:
    """Every scenario (default: the shipped suite) under every policy, in order.

    ``reseed`` k > 0 replaces each scenario's seed by seed + 101·k: the same workload with
    other random draws, to see whether a result holds beyond one sample.
    """
    scenarios = [load_scenario(p) for p in (shipped_scenarios() if paths is None else paths)]
    if reseed:
        scenarios = [sc.model_copy(update={"seed": sc.seed + 101 * reseed}) for sc in scenarios]
    total = len(scenarios) * len(policies)
    reports = []
    for scenario in scenarios:
        for policy in policies:
            _, report = run_policy(scenario, policy, settings)
            reports.append(report)
            if progress is not None:
                progress(len(reports), total, report)
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
    scenario's own), against ``cuzk`` and against the best baseline, where those ran."""
    by_key = {(r.scenario, r.policy): r for r in reports}
    findings = []
    target_ready = settings.controller.target_ready
    for (name, policy), pi in by_key.items():
        if policy != "pi":
            continue
        scenario_findings = _scenario_targets(pi, target_ready)
        cuzk = by_key.get((name, "cuzk"))
        if cuzk is not None:
            scenario_findings += _versus_cuzk(pi, cuzk)
        baselines = [by_key[(name, b)] for b in BASELINES if (name, b) in by_key]
        scenario_findings += _versus_baselines(pi, baselines)
        scenario_findings += _steady_busy(pi, baselines)
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

    mean_limit = MEAN_LITTLE_FACTOR * pi.little_min_inflight + target_ready
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

    add("no budget violations", pi.budget_violations == 0, f"{pi.budget_violations} violations")
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


def _versus_cuzk(pi: Report, cuzk: Report) -> list[Finding]:
    out = [
        Finding(
            pi.scenario,
            "busy ratio >= cuzk",
            pi.gpu_busy_ratio >= cuzk.gpu_busy_ratio,
            f"{pi.gpu_busy_ratio:.4f} vs {cuzk.gpu_busy_ratio:.4f}",
        ),
    ]
    if (
        pi.bottleneck != "memory"
        and cuzk.gpu_busy_ratio >= pi.gpu_busy_ratio - BUSY_VS_BEST_BASELINE
    ):
        # Memory is compared only at equal busy (a policy that starves the GPUs holds less),
        # and where it does not bound (there every policy should hold all of it).
        out.append(
            Finding(
                pi.scenario,
                "mean in flight <= cuzk where as busy",
                pi.mean_inflight_partitions <= cuzk.mean_inflight_partitions,
                f"{pi.mean_inflight_partitions:.1f} vs {cuzk.mean_inflight_partitions:.1f}",
            )
        )
    if cuzk.time_to_steady_s is not None:
        ok = pi.time_to_steady_s is not None and pi.time_to_steady_s <= cuzk.time_to_steady_s
        out.append(
            Finding(
                pi.scenario,
                "steady no later than cuzk",
                ok,
                f"{_seconds(pi.time_to_steady_s)} vs {_seconds(cuzk.time_to_steady_s)}",
            )
        )
    return out


def _versus_baselines(pi: Report, baselines: Sequence[Report]) -> list[Finding]:
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
    if unpaced is not None and pi.bottleneck != "memory":
        out.append(
            Finding(
                pi.scenario,
                "mean in flight < unpaced",
                pi.mean_inflight_partitions < unpaced.mean_inflight_partitions,
                f"{pi.mean_inflight_partitions:.1f} vs {unpaced.mean_inflight_partitions:.1f}",
            )
        )
    return out


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"
