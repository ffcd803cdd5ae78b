"""What the controller's knobs do: the ready buffer, kp and ki on the disturbances.

    .venv/bin/python -m bench.gains [--markdown] [--plot FILE.png] [--seeds N]

Runs pi on the disturbance scenarios (``SCENARIOS``) and prints three sweeps:

- **the ready buffer**, model as shipped: ``target_ready_s`` set to a share of each scenario's
  synthesis lead time (``BUFFER_LEADS``; ``target_ready`` 1, so that the seconds decide);
- **kp and ki with a biased model**: T̂syn read as ``LEAD_BIAS`` of itself (a lead time
  measured without the wait for a core), each gain swept with the other at 0;
- **kp and ki with the model as shipped**: the same sweep, unbiased.

Per setting: the GPU time lost in the two lead times after each disturbance (idle
worker-seconds while work waited, ÷ the live workers, in lead times; mean over the
disturbances), the recovery after each (in lead times, as the report measures it: a trailing
lead time back at 0.95, so 1.00 is the soonest it can read; one never reached counts as
``NEVER_LEADS``), the GPU busy ratio (mean and lowest over the scenarios) and the memory in
flight (mean partitions ÷ Little's law, and GiB, means over the scenarios); for the buffer,
also per scenario. --plot draws the time lost and the busy ratio against memory in flight.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pacer.cli.table import render
from pacer.config import ControllerSettings, Settings
from pacer.control.controller import PIController
from pacer.control.policy import DispatchPolicy
from pacer.sim.engine import RawRun, Simulation, VirtualClock
from pacer.sim.policies import policy_factory
from pacer.sim.report import Report, summarize
from pacer.sim.scenario import Scenario, load_scenario, shipped_scenarios

SCENARIOS = (
    "gpu-stall", "gpu-speedup", "gpu-slowdown", "synthesis-jump", "worker-dies",
    "warm-start-elsewhere",
)  # fmt: skip
BUFFER_LEADS = (0.0, 0.25, 0.5, 0.75, 1.0)
KP = (0.0, 0.25, 0.5, 1.0, 2.0)
KI = (0.0, 0.05, 0.1, 0.2, 0.5)
NEVER_LEADS = 10.0  # a recovery that never came, in lead times
LEAD_BIAS = 0.5  # the biased model reads T̂syn as this share of itself


def simulate_pi(
    scenario: Scenario, settings: Settings, lead_bias: float = 1.0
) -> tuple[RawRun, Report]:
    """pi on ``scenario``; with ``lead_bias`` != 1 its T̂syn is read as that share of itself."""
    factory = policy_factory("pi", scenario, settings)

    def biased(clock: VirtualClock) -> DispatchPolicy:
        controller = factory(clock)
        assert isinstance(controller, PIController)
        lead_s = controller.lead_s
        setattr(controller, "lead_s", lambda: lead_bias * lead_s())  # noqa: B010
        return controller

    raw = Simulation(scenario, "pi", factory if lead_bias == 1.0 else biased).run()
    return raw, summarize(raw)


def run_pi(scenario: Scenario, settings: Settings, lead_bias: float = 1.0) -> Report:
    """The report of ``simulate_pi``."""
    return simulate_pi(scenario, settings, lead_bias)[1]


def lost_leads(raw: RawRun, report: Report) -> list[float]:
    """Per disturbance: GPU time lost in the two lead times after it, in lead times: the
    worker-seconds the GPUs stood idle while work waited, beyond what the new regime leaves
    idle anyway (synthesis bound after a slowdown), ÷ the live workers. Starts (t = 0, warm
    or not) are left out: the GPUs wait a lead time for the first syntheses whatever the
    buffer."""
    sc, tr = raw.scenario, raw.trace
    t = np.asarray(tr.t)
    out = []
    for rec in report.recoveries:
        if rec.at_s == 0:
            continue
        regime = next(r for r in sc.regimes() if r.start_s <= rec.at_s < r.stop_s)
        achievable = regime.achievable_busy * np.asarray(tr.workers)
        short = np.asarray(tr.available) * (achievable - np.asarray(tr.busy))
        cum = np.concatenate(([0.0], np.cumsum(short[:-1] * np.diff(t))))
        end = min(rec.at_s + 2 * rec.lead_s, raw.end_s)
        lost = float(np.interp(end, t, cum) - np.interp(rec.at_s, t, cum))
        out.append(max(0.0, lost) / max(1, regime.workers) / rec.lead_s)
    return out


@dataclass(frozen=True)
class Row:
    """One setting's results over the scenarios and seeds."""

    label: str
    knob: str  # the knob swept: "buffer", "kp" or "ki"
    value: float
    lost_leads: float
    recovery_leads: float
    worst_recovery_leads: float
    busy: float
    lowest_busy: float
    inflight_vs_little: float
    inflight_gib: float
    per_scenario: tuple[tuple[str, float, float], ...]  # (scenario, time lost, in flight ÷ L)


def _scenarios(seeds: int) -> list[Scenario]:
    paths = [p for p in shipped_scenarios() if p.stem in SCENARIOS]
    return [
        (sc := load_scenario(path)).model_copy(update={"seed": sc.seed + 101 * k})
        for path in paths
        for k in range(seeds)
    ]


def _recoveries(report: Report) -> list[float]:
    return [NEVER_LEADS if r.after_s is None else r.after_s / r.lead_s for r in report.recoveries]


def run_row(knob: str, value: float, scenarios: Sequence[Scenario], lead_bias: float = 1.0) -> Row:
    """pi on every scenario with ``knob`` at ``value``: "buffer" (``target_ready_s`` at
    ``value`` × the scenario's lead time, ``target_ready`` 1), "kp" or "ki" (the other at 0)."""
    results: list[tuple[Scenario, Report, list[float]]] = []
    for scenario in scenarios:
        if knob == "buffer":
            lead_s = scenario.synthesis.duration_s.mean
            controller = ControllerSettings(target_ready=1, target_ready_s=value * lead_s)
        else:
            other = "ki" if knob == "kp" else "kp"
            controller = ControllerSettings(**{knob: value, other: 0.0})
        raw, report = simulate_pi(scenario, Settings(controller=controller), lead_bias)
        results.append((scenario, report, lost_leads(raw, report)))
    recoveries = [x for _, r, _ in results for x in _recoveries(r)]
    lost = [x for _, _, losses in results for x in losses]
    return Row(
        label=f"{knob}={value:g}" + (" leads" if knob == "buffer" else ""),
        knob=knob,
        value=value,
        lost_leads=statistics.fmean(lost) if lost else math.nan,
        recovery_leads=statistics.fmean(recoveries),
        worst_recovery_leads=max(recoveries),
        busy=statistics.fmean(r.gpu_busy_ratio for _, r, _ in results),
        lowest_busy=min(r.gpu_busy_ratio for _, r, _ in results),
        inflight_vs_little=statistics.fmean(
            r.mean_inflight_partitions / r.little_min_inflight for _, r, _ in results
        ),
        inflight_gib=statistics.fmean(
            r.mean_inflight_partitions * sc.partition.bytes / 2**30 for sc, r, _ in results
        ),
        per_scenario=tuple(
            (
                sc.name,
                statistics.fmean(losses),
                r.mean_inflight_partitions / r.little_min_inflight,
            )
            for sc, r, losses in results
            if losses
        ),
    )


def render_rows(rows: Sequence[Row], markdown: bool) -> str:
    headers = (
        "setting", "GPU time lost (leads)", "recovery (leads)", "worst (leads)", "busy",
        "lowest busy", "in flight ÷ Little", "in flight (GiB)",
    )  # fmt: skip
    cells = [
        (r.label, f"{r.lost_leads:.3f}", f"{r.recovery_leads:.2f}",
         f"{r.worst_recovery_leads:.2f}", f"{r.busy:.4f}",
         f"{r.lowest_busy:.4f}", f"{r.inflight_vs_little:.3f}", f"{r.inflight_gib:.0f}")
        for r in rows
    ]  # fmt: skip
    return render(headers, cells, markdown=markdown)


def render_per_scenario(rows: Sequence[Row], markdown: bool) -> str:
    """GPU time lost (lead times) and in flight ÷ Little's law per scenario, one column a
    setting."""
    names = sorted({name for r in rows for name, _, _ in r.per_scenario})
    headers = ("scenario", *(r.label for r in rows))
    cells = []
    for name in names:
        cell = []
        for r in rows:
            found = [(lost, held) for n, lost, held in r.per_scenario if n == name]
            lost = statistics.fmean(x for x, _ in found)
            held = statistics.fmean(y for _, y in found)
            cell.append(f"{lost:.3f} / {held:.2f}")
        cells.append((name, *cell))
    return render(headers, cells, markdown=markdown)


def plot(buffer: Sequence[Row], biased: Sequence[Row], shipped: Sequence[Row], path: Path) -> None:
    """Three panels against memory in flight ÷ Little's law: the GPU time the buffer saves
    after the disturbances, per scenario; the busy ratio under kp and ki with the model
    biased; the same with the model as shipped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (buf_ax, bias_ax, ship_ax) = plt.subplots(1, 3, figsize=(16, 4.8))
    ship_ax.sharey(bias_ax)  # one scale: the gains' effect, biased, against none unbiased
    names = sorted({name for name, _, _ in buffer[0].per_scenario})
    for name in names:
        points = [
            (statistics.fmean(x for n, x, _ in r.per_scenario if n == name),
             statistics.fmean(y for n, _, y in r.per_scenario if n == name))
            for r in buffer
        ]  # fmt: skip
        buf_ax.plot([h for _, h in points], [x for x, _ in points], marker="o", label=name)
        for r, (lost, held) in zip(buffer, points, strict=True):
            buf_ax.annotate(f"{r.value:g}", (held, lost), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")  # fmt: skip
    buf_ax.set_title("target_ready_s (in lead times), model as shipped")
    buf_ax.set_ylabel("GPU time lost after a disturbance (lead times)")
    for ax, rows, title in ((bias_ax, biased, f"kp, ki: T̂syn read as {LEAD_BIAS:g}×"),
                            (ship_ax, shipped, "kp, ki: model as shipped")):  # fmt: skip
        for knob in ("ki", "kp"):
            items = [r for r in rows if r.knob == knob]
            ax.plot([r.inflight_vs_little for r in items], [r.busy for r in items], marker="o",
                    label=f"{knob} (the other 0)")  # fmt: skip
            for r in items:
                ax.annotate(f"{r.value:g}", (r.inflight_vs_little, r.busy), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")  # fmt: skip
        ax.set_title(title)
        ax.set_ylabel("GPU busy ratio (mean over the scenarios)")
    for ax in (buf_ax, bias_ax, ship_ax):
        ax.set_xlabel("mean in flight ÷ Little's law")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("pacer's knobs on the disturbance scenarios (bench/gains.py)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="Markdown tables")
    parser.add_argument("--plot", type=Path, metavar="FILE.png", help="plot the three sweeps")
    parser.add_argument("--seeds", type=int, default=1, metavar="N", help="seeds per scenario")
    args = parser.parse_args()
    started = time.perf_counter()
    scenarios = _scenarios(args.seeds)
    gains = [("kp", v) for v in KP] + [("ki", v) for v in KI]
    buffer = [run_row("buffer", f, scenarios) for f in BUFFER_LEADS]
    biased = [run_row(knob, v, scenarios, LEAD_BIAS) for knob, v in gains]
    shipped = [run_row(knob, v, scenarios) for knob, v in gains]
    sections = (
        ("The ready buffer (target_ready_s in lead times, target_ready 1), model as shipped",
         buffer),
        (f"kp and ki, T̂syn read as {LEAD_BIAS:g}×", biased),
        ("kp and ki, model as shipped", shipped),
    )  # fmt: skip
    for title, rows in sections:
        print(f"{title}:\n")
        print(render_rows(rows, args.markdown))
        print()
    print("The ready buffer per scenario (GPU time lost in lead times / in flight ÷ Little):\n")
    print(render_per_scenario(buffer, args.markdown))
    print()
    runs = len(scenarios) * (len(buffer) + len(biased) + len(shipped))
    print(f"{runs} runs ({len(SCENARIOS)} scenarios × {args.seeds} seed(s)) in "
          f"{time.perf_counter() - started:.0f} s; defaults: {_defaults()}")  # fmt: skip
    if args.plot:
        plot(buffer, biased, shipped, args.plot)
    return 0


def _defaults() -> str:
    d = ControllerSettings()
    return f"kp={d.kp:g} ki={d.ki:g} target_ready={d.target_ready:g} " + (
        f"target_ready_s={d.target_ready_s:g}"
    )


if __name__ == "__main__":
    sys.exit(main())
