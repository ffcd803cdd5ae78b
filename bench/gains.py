"""What the controller's knobs do: kp, ki and the ready buffer on disturbed and heavy-tailed hosts.

    .venv/bin/python -m bench.gains [--markdown] [--seeds N] [--jobs J] [--plot FILE.png]

Runs pi on two groups of shipped scenarios, the model as shipped (no bias injected):

- **disturbed** (``DISTURBED``): a GPU lost and returned, GPUs that slow and speed up again, a
  synthesis slowdown that leaves the GPUs the bottleneck;
- **heavy-tailed** (``HEAVY``): synthesis times of a lognormal tail, partitions of 1× or 4×
  the work drawn independently;

and sweeps one knob at a time from the defaults: kp over ``KP``, ki over ``KI`` (the ranges
the tuning guide calls safe), and the ready buffer ``target_ready_s`` in lead times over
``BUFFER_LEADS`` (``target_ready`` 1, so that the seconds decide). Per setting and group, means
over the scenarios and seeds: the GPU busy ratio; the worst margin of busy against the best
baseline of the same scenario and seed (unpaced, cuzk, cuzk-default, fixed: a setting that
loses more than 0.005 is unsafe); mean partitions in flight; the recovery after each
disturbance (t > 0) in lead times, as the report measures it (a trailing lead time back at
0.95, so 1.00 is the soonest it can read; one never reached counts as ``NEVER_LEADS``). Then,
per knob and group, how much each measure moved over the range and whether it moved one way.
--plot draws busy time and recovery against memory in flight for each knob.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pacer.cli.table import render
from pacer.config import ControllerSettings, Settings
from pacer.sim.engine import RawRun, Simulation
from pacer.sim.policies import policy_factory
from pacer.sim.report import Report, summarize
from pacer.sim.scenario import Scenario, load_scenario, scenario_path
from pacer.sim.suite import BASELINES, run_policy

DISTURBED = ("gpu-outage", "gpu-slowdown", "synthesis-slowdown-gpu-bound")
HEAVY = ("heavy-tail", "bimodal-partitions")
KP = (1.0, 2.0, 4.0, 8.0)  # the safe range, 2 to 8, and one below it
KI = (0.0, 0.1, 0.25, 0.5)  # the safe range, 0 to 0.25, and one above it
SAFE = {"kp": (2.0, 8.0), "ki": (0.0, 0.25), "buffer": (0.0, 1.0)}  # docs/controller.md, "Tuning"
BUFFER_LEADS = (0.0, 0.5, 1.0)
NEVER_LEADS = 10.0  # a recovery that never came, in lead times
MOVED = 0.02  # a knob "acts" where a measure moves one way by at least this share


def simulate_pi(scenario: Scenario, settings: Settings) -> tuple[RawRun, Report]:
    """pi on ``scenario`` with ``settings``."""
    raw = Simulation(scenario, "pi", policy_factory("pi", scenario, settings)).run()
    return raw, summarize(raw)


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


def _scenarios(names: Sequence[str], seeds: int) -> list[Scenario]:
    return [
        (sc := load_scenario(scenario_path(name))).model_copy(update={"seed": sc.seed + 101 * k})
        for name in names
        for k in range(seeds)
    ]


def _controller(knob: str, value: float, scenario: Scenario) -> ControllerSettings:
    if knob == "buffer":
        lead_s = scenario.synthesis.duration_s.mean
        return ControllerSettings(target_ready=1, target_ready_s=value * lead_s)
    return ControllerSettings(**{knob: value})


def _pi(job: tuple[str, float, Scenario]) -> Report:
    knob, value, scenario = job
    return run_policy(scenario, "pi", Settings(controller=_controller(knob, value, scenario)))[1]


def _best_baseline(scenario: Scenario) -> float:
    return max(run_policy(scenario, b, Settings())[1].gpu_busy_ratio for b in BASELINES)


def _recoveries(report: Report) -> list[float]:
    return [
        NEVER_LEADS if r.after_s is None else r.after_s / r.lead_s
        for r in report.recoveries
        if r.at_s > 0
    ]


@dataclass(frozen=True)
class Row:
    """One setting's results over a group's scenarios and seeds."""

    group: str
    knob: str
    value: float
    busy: float
    worst_margin: float  # the lowest busy less the best baseline's, scenario by scenario
    inflight: float
    recovery_leads: float  # nan where the group has no disturbance
    margins: tuple[tuple[str, float], ...]  # (scenario, its worst busy less the best baseline)

    @property
    def label(self) -> str:
        return f"{self.knob}={self.value:g}" + (" leads" if self.knob == "buffer" else "")


def sweep(seeds: int, jobs: int) -> list[Row]:
    """Every knob's range on both groups; the baselines of each scenario and seed once."""
    groups = {"disturbed": _scenarios(DISTURBED, seeds), "heavy-tailed": _scenarios(HEAVY, seeds)}
    settings = [("kp", v) for v in KP] + [("ki", v) for v in KI]
    settings += [("buffer", v) for v in BUFFER_LEADS]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        best = {g: list(pool.map(_best_baseline, scs)) for g, scs in groups.items()}
        rows = []
        for (group, scs), (knob, value) in itertools.product(groups.items(), settings):
            reports = list(pool.map(_pi, [(knob, value, sc) for sc in scs]))
            recoveries = [x for r in reports for x in _recoveries(r)]
            margin: dict[str, float] = {}
            for r, b in zip(reports, best[group], strict=True):
                margin[r.scenario] = min(margin.get(r.scenario, 1.0), r.gpu_busy_ratio - b)
            rows.append(Row(
                group, knob, value,
                busy=statistics.fmean(r.gpu_busy_ratio for r in reports),
                worst_margin=min(margin.values()),
                inflight=statistics.fmean(r.mean_inflight_partitions for r in reports),
                recovery_leads=statistics.fmean(recoveries) if recoveries else math.nan,
                margins=tuple(margin.items()),
            ))  # fmt: skip
    return rows


def render_rows(rows: Sequence[Row], markdown: bool) -> str:
    headers = ("group", "setting", "busy", "worst busy − best baseline", "mean in flight",
               "recovery (leads)")  # fmt: skip
    cells = [
        (r.group, r.label, f"{r.busy:.4f}", f"{r.worst_margin:+.4f}", f"{r.inflight:.2f}",
         "-" if math.isnan(r.recovery_leads) else f"{r.recovery_leads:.3f}")
        for r in rows
    ]  # fmt: skip
    return render(headers, cells, markdown=markdown)


def render_margins(rows: Sequence[Row], markdown: bool) -> str:
    """Per scenario and setting: the worst busy less the best baseline over the seeds."""
    names = list(dict.fromkeys(name for r in rows for name, _ in r.margins))
    cells = []
    for name in names:
        cell = [name]
        for r in rows:
            found = dict(r.margins)
            cell.append(f"{found[name]:+.4f}" if name in found else "")
        cells.append(tuple(cell))
    headers = ("scenario", *(r.label for r in rows if r.group == rows[0].group))
    # Each scenario is in one group: its cells of the other group are empty, dropped here.
    cells = [tuple(c for c in cell if c != "") for cell in cells]
    return render(headers, cells, markdown=markdown)


def movement(rows: Sequence[Row], markdown: bool) -> str:
    """Per knob and group: each measure's change over the knob's safe range (``SAFE``: first
    to last setting in it, as a share of the first) and whether every step went one way."""
    cells = []
    for group, knob in itertools.product(("disturbed", "heavy-tailed"), ("kp", "ki", "buffer")):
        low, high = SAFE[knob]
        items = [r for r in rows if r.group == group and r.knob == knob and low <= r.value <= high]
        line: list[str] = [group, knob]
        for measure in ("busy", "inflight", "recovery_leads"):
            values = [getattr(r, measure) for r in items]
            if any(math.isnan(v) for v in values):
                line.append("-")
                continue
            steps = [b - a for a, b in itertools.pairwise(values)]
            one_way = all(s >= 0 for s in steps) or all(s <= 0 for s in steps)
            share = (values[-1] - values[0]) / values[0]
            mark = "one way" if one_way else "both ways"
            acts = " (acts)" if one_way and abs(share) >= MOVED else ""
            line.append(f"{share:+.1%}, {mark}{acts}")
        cells.append(tuple(line))
    return render(("group", "knob", "busy", "mean in flight", "recovery"), cells,
                  markdown=markdown)  # fmt: skip


def plot(rows: Sequence[Row], path: Path) -> None:
    """Against memory in flight: busy and recovery on the disturbed hosts, busy on the
    heavy-tailed ones (they have no disturbance to recover from)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("disturbed", "busy"), ("disturbed", "recovery_leads"), ("heavy-tailed", "busy"))
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    for ax, (group, measure) in zip(axes, panels, strict=True):
        for knob in ("kp", "ki", "buffer"):
            items = [r for r in rows if r.group == group and r.knob == knob]
            ys = [getattr(r, measure) for r in items]
            ax.plot([r.inflight for r in items], ys, marker="o", label=knob)
            for r, y in zip(items, ys, strict=True):
                ax.annotate(f"{r.value:g}", (r.inflight, y), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")  # fmt: skip
        ax.set_title(f"{group}: {'recovery (lead times)' if measure != 'busy' else 'GPU busy'}")
        ax.set_xlabel("mean partitions in flight")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("pacer's knobs, the model as shipped, ten seeds (bench/gains.py)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="Markdown tables")
    parser.add_argument("--plot", type=Path, metavar="FILE.png", help="plot the sweeps")
    parser.add_argument("--seeds", type=int, default=1, metavar="N", help="seeds per scenario")
    parser.add_argument("--jobs", type=int, default=1, metavar="J", help="processes (1)")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = sweep(args.seeds, args.jobs)
    print(render_rows(rows, args.markdown))
    print()
    print("Worst busy less the best baseline, per scenario (over the seeds):\n")
    print(render_margins(rows, args.markdown))
    print()
    print(f"Over each knob's safe range (a measure {MOVED:.0%} or more one way: it acts):\n")
    print(movement(rows, args.markdown))
    print()
    d = ControllerSettings()
    runs = (len(DISTURBED) + len(HEAVY)) * args.seeds * (len(rows) // 2 + len(BASELINES))
    print(f"{runs} runs ({args.seeds} seed(s)) in {time.perf_counter() - started:.0f} s; "
          f"defaults: kp={d.kp:g} ki={d.ki:g} target_ready={d.target_ready:g} "
          f"target_ready_s={d.target_ready_s:g}")  # fmt: skip
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
