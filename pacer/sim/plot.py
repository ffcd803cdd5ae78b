"""`pacer simulate --plot`: ready depth, interval, in-flight and GPU busy over time."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pacer.sim.engine import RawRun


class PlotUnavailableError(Exception):
    """matplotlib is not installed (``pip install 'pacer[plot]'``)."""


def plot_run(run: RawRun, path: Path, target_ready: float | None = None) -> None:
    """Write a four-panel PNG of one run to ``path``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotUnavailableError("--plot needs matplotlib: pip install 'pacer[plot]'") from exc

    tr = run.trace
    sc = run.scenario
    t = np.asarray(tr.t)
    fig, axes = plt.subplots(4, 1, figsize=(11, 10), sharex=True)
    fig.suptitle(f"{sc.name} — policy {run.policy}")

    ax = axes[0]
    ax.step(t, tr.ready, where="post", lw=0.8, label="ready (waiting for a GPU)")
    if target_ready is not None and run.policy == "pi":
        ax.axhline(target_ready, color="k", ls="--", lw=0.8, label="target ready")
    ax.set_ylabel("partitions")
    ax.legend(loc="upper right", fontsize=8)

    ax = axes[1]
    ax.step(t, tr.interval_s, where="post", lw=0.8, color="tab:purple")
    ax.set_ylabel("dispatch interval (s)")
    ax.set_yscale("symlog", linthresh=0.1)

    ax = axes[2]
    ax.step(t, tr.inflight, where="post", lw=0.8, label="in flight (holding memory)")
    ax.step(t, tr.synthesizing, where="post", lw=0.8, label="in synthesis")
    ax.axhline(sc.memory_slots, color="tab:red", ls="--", lw=0.8, label="memory budget")
    ax.axhline(sc.little_min_inflight, color="k", ls=":", lw=0.8, label="Little's-law minimum")
    ax.set_ylabel("partitions")
    ax.legend(loc="upper right", fontsize=8)

    ax = axes[3]
    window = max(60.0, 20 * sc.gpu.service_s.mean)
    grid = np.arange(window, max(t[-1], window) + 1.0, 1.0)
    cum = np.concatenate(([0.0], np.cumsum(np.asarray(tr.busy[:-1]) * np.diff(t))))
    busy = (np.interp(grid, t, cum) - np.interp(grid - window, t, cum)) / (window * sc.gpu.workers)
    ax.plot(grid, busy, lw=0.8, color="tab:green")
    ax.set_ylabel(f"GPU busy ({window:.0f} s window)")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("simulated time (s)")

    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
