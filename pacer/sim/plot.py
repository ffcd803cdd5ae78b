"""`pacer simulate --plot`: ready depth, interval, in-flight and GPU busy over time.

Stretches where the scenario disturbs the host (a stall, a slower or faster GPU or CPU, a dead
worker: ``Scenario.regimes``) are shaded in every panel and named above the first; legends sit
outside the axes, beside the panel they explain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pacer.sim.engine import RawRun
from pacer.sim.scenario import Scenario

SHADE = {"color": "0.55", "alpha": 0.18, "lw": 0}
LEGEND = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0,
          "fontsize": 8, "frameon": False}  # fmt: skip


PLOT_EXTRA = (
    "--plot needs matplotlib, which the plot extra installs: pip install -e '.[plot]' in a "
    "checkout of pacer, or pip install 'pacer[plot]'"
)


class PlotUnavailableError(Exception):
    """matplotlib is not installed (the ``plot`` extra: `PLOT_EXTRA`)."""


class PlotPathError(ValueError):
    """A plot cannot be written where asked: no such folder, or a file type matplotlib does
    not write."""


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotUnavailableError(PLOT_EXTRA) from exc
    return plt


def check_plot_path(path: Path) -> None:
    """Refuse, before anything runs, a ``path`` no plot can be written to: PlotPathError
    (or PlotUnavailableError without matplotlib), in one line."""
    _pyplot()
    from matplotlib.backend_bases import FigureCanvasBase

    if not path.parent.is_dir():
        raise PlotPathError(f"--plot {path}: no directory {path.parent}")
    types = FigureCanvasBase.get_supported_filetypes()
    if path.suffix.lower().lstrip(".") not in types:
        raise PlotPathError(
            f"--plot {path}: the name must end in a type matplotlib writes: "
            + ", ".join(f".{t}" for t in sorted(types))
        )


@dataclass(frozen=True)
class Window:
    """A stretch of simulated time that differs from the scenario's nominal host (s)."""

    start_s: float
    stop_s: float
    label: str


def disturbances(scenario: Scenario, end_s: float) -> list[Window]:
    """The scenario's regimes that are not its nominal host, named by what differs: ``GPU
    stalled``, ``GPU time x1.8``, ``synthesis x5``, ``3 of 4 workers``; merged where one
    continues the other."""
    sc = scenario
    gpu_s = sc.gpu.service_s.mean * sc.jobs.mean_work_scale
    synthesis_s = sc.synthesis.duration_s.mean * sc.jobs.mean_work_scale
    windows: list[Window] = []
    for regime in sc.regimes():
        if regime.start_s >= end_s:
            break
        parts = []
        if regime.workers == 0:
            parts.append("GPU stalled")
        else:
            if not math.isclose(regime.gpu_s, gpu_s):
                parts.append(f"GPU time x{regime.gpu_s / gpu_s:.3g}")
            if regime.workers < sc.gpu.workers:
                parts.append(f"{regime.workers} of {sc.gpu.workers} workers")
        if not math.isclose(regime.synthesis_s, synthesis_s):
            parts.append(f"synthesis x{regime.synthesis_s / synthesis_s:.3g}")
        if not parts:
            continue
        label, stop = ", ".join(parts), min(regime.stop_s, end_s)
        if windows and windows[-1].label == label and windows[-1].stop_s == regime.start_s:
            windows[-1] = Window(windows[-1].start_s, stop, label)
        else:
            windows.append(Window(regime.start_s, stop, label))
    return windows


def _interval_axis(ax: Any, t: np.ndarray, interval_s: np.ndarray) -> None:
    """Log scale from the shortest to the longest interval used, in plain seconds."""
    from matplotlib.ticker import FuncFormatter

    used = interval_s > 0
    ax.step(t[used], interval_s[used], where="post", lw=0.8, color="tab:purple",
            label="dispatch interval")  # fmt: skip
    ax.set_yscale("log")
    low, high = (float(interval_s[used].min()), float(interval_s[used].max())) if used.any() \
        else (0.1, 1.0)  # fmt: skip
    ax.set_ylim(low / 1.6, high * 1.6)
    # Plain numbers (0.2, not 2×10⁻¹); minor ticks labelled too where few decades show.
    decades = math.log10(high * 1.6 / (low / 1.6))
    minor = (2, 3, 5) if decades < 1 else (2, 5) if decades < 2 else ()
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: f"{y:g}" if _mantissa(y) in minor
                                               else ""))  # fmt: skip
    ax.set_ylabel("interval (s, log)")


def _mantissa(y: float) -> int:
    """The leading digit of ``y`` > 0 (3 for 0.3)."""
    return round(y / 10.0 ** math.floor(math.log10(y) + 1e-9))


def _busy(run: RawRun, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """GPU busy ratio over a trailing window: times, ratios and the window (s)."""
    tr, sc = run.trace, run.scenario
    window = max(60.0, 20 * sc.gpu.service_s.mean)
    grid = np.arange(window, max(t[-1], window) + 1.0, 1.0)
    cum = np.concatenate(([0.0], np.cumsum(np.asarray(tr.busy[:-1]) * np.diff(t))))
    busy = (np.interp(grid, t, cum) - np.interp(grid - window, t, cum)) / (window * sc.gpu.workers)
    return grid, busy, window


def plot_run(run: RawRun, path: Path, target_ready: float | None = None) -> None:
    """Write a four-panel figure of one run to ``path`` (its type from the name: .png, .svg,
    .pdf, ...)."""
    plt = _pyplot()
    fig = draw(run, target_ready)
    try:
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)


def draw(run: RawRun, target_ready: float | None = None) -> Any:
    """The figure of one run (a matplotlib Figure; the caller closes it): ready depth against
    the target, dispatch interval, partitions in flight and in synthesis against the memory
    budget, and the GPU busy ratio, over simulated time."""
    plt = _pyplot()
    tr, sc = run.trace, run.scenario
    t = np.asarray(tr.t)
    fig, axes = plt.subplots(4, 1, figsize=(13, 10), sharex=True, layout="constrained")
    fig.suptitle(f"{sc.name} — policy {run.policy}" + (f"\n{sc.description}" if sc.description
                                                        else ""))  # fmt: skip

    ax = axes[0]
    ax.step(t, tr.ready, where="post", lw=0.8, label="ready (waiting for a GPU)")
    if target_ready is not None and run.policy == "pi":
        ax.axhline(target_ready, color="k", ls="--", lw=1.0, label="target ready")
    ax.set_ylabel("partitions")

    _interval_axis(axes[1], t, np.asarray(tr.interval_s))

    ax = axes[2]
    inflight = np.asarray(tr.inflight)
    ax.fill_between(t, inflight, step="post", color="tab:blue", alpha=0.2, lw=0)
    ax.step(t, inflight, where="post", lw=0.8, color="tab:blue", label="in flight (holding memory)")
    ax.step(t, tr.synthesizing, where="post", lw=0.8, color="tab:orange", label="in synthesis")
    # Drawn last and thick: it stays visible where the in-flight count sits on it.
    ax.axhline(sc.little_min_inflight, color="k", ls=":", lw=1.2, label="Little's-law minimum")
    ax.axhline(sc.memory_slots, color="tab:red", ls="--", lw=1.6, zorder=5,
               label=f"memory budget ({sc.memory_slots})")  # fmt: skip
    top = max(sc.memory_slots, sc.little_min_inflight, float(inflight.max(initial=0)))
    ax.set_ylim(0, top * 1.12)
    ax.set_ylabel("partitions")

    ax = axes[3]
    grid, busy, window = _busy(run, t)
    ax.plot(grid, busy, lw=0.8, color="tab:green", label=f"GPU busy ({window:.0f} s window)")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("GPU busy ratio")
    ax.set_xlabel("simulated time (s)")
    ax.set_xlim(0, max(float(t[-1]), 1.0))

    _shade(axes, sc, float(t[-1]))
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(**LEGEND)
    return fig


def _shade(axes: Any, scenario: Scenario, end_s: float) -> None:
    """Shade each disturbance in every panel, name it above the first; mark each synthesis
    failure with a line."""
    for window in disturbances(scenario, end_s):
        for ax in axes:
            ax.axvspan(window.start_s, window.stop_s, **SHADE)
        axes[0].annotate(
            window.label, xy=((window.start_s + window.stop_s) / 2, 1.0),
            xycoords=("data", "axes fraction"), xytext=(0, 3), textcoords="offset points",
            ha="center", va="bottom", fontsize=8, color="tab:brown",
        )  # fmt: skip
    for failure in scenario.synthesis.failures:
        for i, ax in enumerate(axes):
            ax.axvline(failure.at_s, color="tab:brown", lw=0.8, ls="-.",
                       label="a synthesis fails" if i == 0 else None)  # fmt: skip
