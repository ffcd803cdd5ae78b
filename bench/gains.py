"""What the controller's knobs do: kp, ki and the ready buffer swept on the disturbances.

    .venv/bin/python -m bench.gains [--markdown] [--plot FILE.png] [--full] [--seeds N]

Runs pi on the disturbance scenarios for each setting, twice: as shipped, and with the model
biased (T̂syn read as ``LEAD_BIAS`` of itself, as a lead time measured without the wait for a
core would be). It prints, per setting and model: the recovery
after each disturbance in synthesis lead times (mean and worst over the disturbances; a
disturbance never recovered from counts as 10), the GPU busy ratio (mean over the scenarios,
and the lowest) and the memory in flight (mean partitions ÷ Little's law, and GiB, means over
the scenarios). The default sweep moves one knob at a time around the defaults on the shipped
seed; --full crosses kp and ki and adds seeds. --plot draws recovery against memory in flight.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pacer.config import ControllerSettings, Settings
from pacer.controller import PIController
from pacer.policy import DispatchPolicy
from pacer.sim.engine import Simulation, VirtualClock
from pacer.sim.policies import policy_factory
from pacer.sim.report import Report, summarize
from pacer.sim.scenario import Scenario, load_scenario, shipped_scenarios
from pacer.table import render

SCENARIOS = ("gpu-stall", "gpu-speedup", "synthesis-jump", "mixed-sizes", "worker-dies", "h200")
KP = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)
KI = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0)
TARGET_READY_S = (0.0, 0.5, 2.0, 5.0)
NEVER_LEADS = 10.0  # a recovery that never came, in lead times
LEAD_BIAS = 0.5  # the biased model reads T̂syn as this share of itself


def run_pi(scenario: Scenario, settings: Settings, lead_bias: float = 1.0) -> Report:
    """pi on ``scenario``; with ``lead_bias`` != 1 its T̂syn is read as that share of itself."""
    factory = policy_factory("pi", scenario, settings)

    def biased(clock: VirtualClock) -> DispatchPolicy:
        controller = factory(clock)
        assert isinstance(controller, PIController)
        lead_s = controller.lead_s
        setattr(controller, "lead_s", lambda: lead_bias * lead_s())  # noqa: B010
        return controller

    return summarize(Simulation(scenario, "pi", factory if lead_bias == 1.0 else biased).run())


@dataclass(frozen=True)
class Row:
    """One setting's results over the scenarios and seeds."""

    setting: dict[str, float]
    recovery_leads: float
    worst_recovery_leads: float
    busy: float
    lowest_busy: float
    inflight_vs_little: float
    inflight_gib: float


def sweep_settings(full: bool) -> list[dict[str, float]]:
    """The settings to run: one knob at a time around the defaults, or (``full``) kp × ki and
    the buffer sweep."""
    if full:
        crossed = [{"kp": kp, "ki": ki} for kp, ki in itertools.product(KP, KI)]
    else:
        crossed = [{"kp": kp} for kp in KP] + [{"ki": ki} for ki in KI]
    buffers = [{"target_ready_s": b} for b in TARGET_READY_S]
    unique = {tuple(sorted(s.items())): s for s in crossed + buffers}
    return list(unique.values())


def run_setting(setting: dict[str, float], seeds: int, lead_bias: float = 1.0) -> Row:
    """pi on every scenario of ``SCENARIOS`` and ``seeds`` seeds under ``setting``."""
    settings = Settings(controller=ControllerSettings(**setting))
    paths = [p for p in shipped_scenarios() if p.stem in SCENARIOS]
    recoveries: list[float] = []
    reports: list[tuple[Report, int]] = []
    for path, k in itertools.product(paths, range(seeds)):
        scenario = load_scenario(path)
        scenario = scenario.model_copy(update={"seed": scenario.seed + 101 * k})
        report = run_pi(scenario, settings, lead_bias)
        reports.append((report, scenario.partition.bytes))
        recoveries += [
            NEVER_LEADS if r.after_s is None else r.after_s / r.lead_s for r in report.recoveries
        ]
    return Row(
        setting,
        statistics.fmean(recoveries),
        max(recoveries),
        statistics.fmean(r.gpu_busy_ratio for r, _ in reports),
        min(r.gpu_busy_ratio for r, _ in reports),
        statistics.fmean(r.mean_inflight_partitions / r.little_min_inflight for r, _ in reports),
        statistics.fmean(r.mean_inflight_partitions * b / 2**30 for r, b in reports),
    )


def _label(setting: dict[str, float]) -> str:
    return " ".join(f"{k}={v:g}" for k, v in setting.items())


def render_rows(rows: Sequence[Row], markdown: bool) -> str:
    headers = (
        "setting", "recovery (leads)", "worst (leads)", "busy", "lowest busy",
        "in flight ÷ Little", "in flight (GiB)",
    )  # fmt: skip
    cells = [
        (_label(r.setting), f"{r.recovery_leads:.2f}", f"{r.worst_recovery_leads:.2f}",
         f"{r.busy:.4f}", f"{r.lowest_busy:.4f}", f"{r.inflight_vs_little:.3f}",
         f"{r.inflight_gib:.0f}")
        for r in rows
    ]  # fmt: skip
    return render(headers, cells, markdown=markdown)


def plot(tables: Sequence[tuple[str, Sequence[Row]]], path: Path) -> None:
    """Recovery (lead times) and busy ratio against memory in flight (÷ Little's law), one
    series per knob, one row of panels per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(tables), 2, figsize=(11, 4 * len(tables)), squeeze=False)
    for (title, rows), (rec_ax, busy_ax) in zip(tables, axes, strict=True):
        series: dict[str, list[Row]] = {}
        for r in rows:
            if len(r.setting) == 1:
                series.setdefault(next(iter(r.setting)), []).append(r)
        for name, items in series.items():
            x = [r.inflight_vs_little for r in items]
            for ax, y in ((rec_ax, [r.recovery_leads for r in items]),
                          (busy_ax, [r.busy for r in items])):  # fmt: skip
                ax.plot(x, y, marker="o", label=name)
                for r, yi in zip(items, y, strict=True):
                    ax.annotate(f"{next(iter(r.setting.values())):g}", (r.inflight_vs_little, yi),
                                fontsize=7, xytext=(3, 3), textcoords="offset points")  # fmt: skip
        rec_ax.set_ylabel("recovery (synthesis lead times, mean)")
        busy_ax.set_ylabel("GPU busy ratio (mean)")
        for ax in (rec_ax, busy_ax):
            ax.set_xlabel("mean in flight ÷ Little's law")
            ax.set_title(title)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle("pacer's knobs on the disturbance scenarios (bench/gains.py)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    parser.add_argument("--plot", type=Path, metavar="FILE.png", help="plot recovery vs memory")
    parser.add_argument("--full", action="store_true", help="kp × ki crossed, and 3 seeds")
    parser.add_argument("--seeds", type=int, default=0, metavar="N", help="seeds per scenario")
    args = parser.parse_args()
    seeds = args.seeds or (3 if args.full else 1)
    started = time.perf_counter()
    settings = sweep_settings(args.full)
    tables = []
    for bias, title in ((1.0, "model as shipped"), (LEAD_BIAS, f"T̂syn read as {LEAD_BIAS:g}×")):
        rows = []
        for i, setting in enumerate(settings, 1):
            rows.append(run_setting(setting, seeds, bias))
            print(f"[{i}/{len(settings)}] {title}: {_label(setting)}", file=sys.stderr)
        tables.append((title, rows))
        print(f"{title}:\n")
        print(render_rows(rows, args.markdown))
        print()
    print(
        f"{len(settings)} settings × 2 models × {len(SCENARIOS)} scenarios × {seeds} seed(s) "
        f"in {time.perf_counter() - started:.0f} s; defaults: {_defaults()}"
    )
    if args.plot:
        plot(tables, args.plot)
    return 0


def _defaults() -> str:
    d = ControllerSettings()
    return f"kp={d.kp:g} ki={d.ki:g} target_ready_s={d.target_ready_s:g}"


if __name__ == "__main__":
    sys.exit(main())
