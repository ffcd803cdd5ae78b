"""`pacer tune --plot`: the grid's points as mean memory in flight against GPU idle, the frontier
drawn through them, the current and the tuned settings marked, and the goal's bound."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pacer.host.memory import bytes_text
from pacer.sim.plot import LEGEND, _pyplot
from pacer.sim.sweep import Goal, Point, frontier, point_text
from pacer.sim.tuning import Tuning, memory_unit


def plot_frontier(tuning: Tuning, path: Path, title: str = "") -> None:
    """Write the figure of ``tuning`` to ``path`` (its type from the name: .png, .svg, .pdf,
    ...)."""
    plt = _pyplot()
    fig = draw_frontier(tuning.points, tuning.current, tuning.tuned, tuning.goal, title)
    try:
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)


def draw_frontier(
    points: Sequence[Point], current: Point, tuned: Point, goal: Goal, title: str = ""
) -> Any:
    """The figure (a matplotlib Figure; the caller closes it)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 6), layout="constrained")
    unit, size = memory_unit(points)

    def xy(some: Sequence[Point]) -> tuple[list[float], list[float]]:
        return ([p.outcome.memory_bytes / size for p in some], [p.outcome.idle for p in some])

    ax.scatter(*xy(points), s=14, color="0.65", label=f"the grid's points ({len(points)})")
    edge = frontier(points)
    ax.plot(*xy(edge), "-o", ms=4, lw=1.2, color="tab:blue", label="the frontier")
    for point, label, style in (
        (current, "current", {"marker": "s", "s": 90, "color": "tab:red"}),
        (tuned, "tuned", {"marker": "*", "s": 220, "color": "tab:green"}),
    ):
        ax.scatter(*xy([point]), zorder=5, label=f"{label}: {point_text(point)}", **style)
        ax.annotate(label, xy=(point.outcome.memory_bytes / size, point.outcome.idle),
                    xytext=(8, 6), textcoords="offset points", fontsize=9)  # fmt: skip
    if goal.kind == "min-memory":
        ax.axhline(1 - goal.bound, color="k", ls="--", lw=1.0,
                   label=f"goal: GPU busy >= {goal.bound:g}")  # fmt: skip
    else:
        ax.axvline(goal.bound / size, color="k", ls="--", lw=1.0,
                   label=f"goal: memory <= {bytes_text(goal.bound)}")  # fmt: skip
    # Idle is a share >= 0: from 0 to the highest point or the goal's line, whichever is higher.
    line = 1 - goal.bound if goal.kind == "min-memory" else 0.0
    ax.set_ylim(0, 1.15 * max(max(p.outcome.idle for p in points), line, 0.01))
    ax.set_xlabel(f"mean memory in flight ({unit})")
    ax.set_ylabel("GPU idle share while partitions waited for dispatch")
    ax.set_title(f"pacer tune: {title}" if title else "pacer tune")
    ax.grid(alpha=0.3)
    ax.legend(**LEGEND)
    return fig
