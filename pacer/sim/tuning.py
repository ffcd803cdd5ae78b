"""One tuning, start to end (`pacer tune`): the grid swept on the part of a recording tuned on,
the goal's point chosen, the current and the tuned settings checked on each part; and its
report as an environment file, the report as comments and the settings after it."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pacer.cli.table import render
from pacer.config import Settings, env_name
from pacer.sim.recording import Recording
from pacer.sim.replay import HostShape
from pacer.sim.sweep import Goal, GoalError, Grid, Point, frontier, sweep, value_text

UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))


@dataclass(frozen=True)
class Check:
    """The current and the tuned settings on one part of the recording."""

    part: str  # "tuned on" or "held out"
    partitions: int
    current: Point
    tuned: Point


@dataclass(frozen=True)
class Tuning:
    """What a tuning found: every point swept on the part tuned on (the current settings among
    them), the current and the tuned point there, and the check on each part."""

    goal: Goal
    grid: Grid
    seeds: int
    points: list[Point]
    current: Point
    tuned: Point
    checks: list[Check]


class NoPointMeetsGoal(GoalError):  # noqa: N818 - a GoalError, with the frontier to show
    """No point meets the goal; ``frontier`` is the table of what the grid reaches."""

    def __init__(self, message: str, frontier: str) -> None:
        super().__init__(message)
        self.frontier = frontier


def tune(
    tuned_on: Recording,
    held_out: Recording | None,
    host: HostShape,
    settings: Settings,
    grid: Grid,
    goal: Goal,
    seeds: int,
    progress: Callable[[int, int], None] | None = None,
    processes: int = 1,
) -> Tuning:
    """Sweep ``grid`` on ``tuned_on`` (the current ``settings`` too, where the grid misses
    them), choose the point ``goal`` names, and check it against the current settings on
    ``tuned_on`` and ``held_out``. NoPointMeetsGoal where no point meets the goal."""
    current = {name: getattr(settings.controller, name) for name, _ in grid.axes}
    points = grid.points()
    if current not in points:
        points.append(current)
    swept = sweep(points, tuned_on, host, settings, seeds, progress, processes)
    now = next(p for p in swept if p.values == current)
    try:
        tuned = goal.choose(swept)
    except GoalError as exc:
        raise NoPointMeetsGoal(str(exc), frontier_text(swept, now, None)) from None
    checks = [Check("tuned on", len(tuned_on), now, tuned)]
    if held_out is not None:
        pair = [now.values] if tuned is now else [now.values, tuned.values]
        again = sweep(pair, held_out, host, settings, seeds, processes=processes)
        checks.append(Check("held out", len(held_out), again[0], again[-1]))
    return Tuning(goal, grid, seeds, swept, now, tuned, checks)


def environment_file(tuning: Tuning, header: list[str]) -> str:
    """The report as comments (``header`` lines first), then one ``PACER_CONTROLLER__*`` line
    for each setting swept: what a systemd EnvironmentFile or ``set -a; . FILE`` reads."""
    lines = [
        *header,
        f"grid: {tuning.grid.describe()}; {tuning.seeds} seeds each",
        "",
        frontier_text(tuning.points, tuning.current, tuning.tuned),
        "",
        check_text(tuning.goal, tuning.checks),
        "",
        "The settings (an environment file; the settings it does not name stay as they are):",
    ]
    out = [f"# {line}".rstrip() for text in lines for line in text.split("\n")]
    out += [
        f"{env_name(('controller', name))}={shlex.quote(value_text(value))}"
        for name, value in tuning.tuned.values.items()
    ]
    return "\n".join(out)


def _indented(headers: list[str], rows: list[list[object]]) -> str:
    return "\n".join("  " + line for line in render(headers, rows).split("\n"))


def memory_unit(points: Sequence[Point]) -> tuple[str, int]:
    """The unit a table shows memory in: the largest its largest peak reaches one of."""
    peak = max(p.outcome.peak_bytes for p in points)
    return next(((name, size) for name, size in UNITS if peak >= size), UNITS[-1])


def frontier_text(points: list[Point], current: Point, tuned: Point | None) -> str:
    """The frontier on the part tuned on, the current and tuned points marked (the current one
    added where it is off the frontier)."""
    rows = frontier(points)
    if current not in rows:
        rows = sorted([*rows, current], key=lambda p: p.outcome.memory_bytes)
    names = list(current.values)
    unit, size = memory_unit(rows)
    body: list[list[object]] = []
    for p in rows:
        marks = [label for label, q in (("current", current), ("tuned", tuned))
                 if q is not None and p.values == q.values]  # fmt: skip
        o = p.outcome
        body.append([*(value_text(p.values[n]) for n in names), f"{o.busy:.4f}",
                     f"{o.busy_min:.4f}", f"{o.memory_bytes / size:.2f}",
                     f"{o.peak_bytes / size:.2f}", ", ".join(marks) or "-"])  # fmt: skip
    headers = [*names, "GPU busy", "lowest seed", f"memory {unit}", f"peak {unit}", "settings"]
    return ("The frontier on the part tuned on (no other point as busy with less memory):\n"
            + _indented(headers, body))  # fmt: skip


def check_text(goal: Goal, checks: list[Check]) -> str:
    """Current against tuned on each part: busy, memory, whether each meets the goal; then
    whether the tuned settings do better, part by part."""
    rows: list[list[object]] = []
    verdicts = []
    unit, size = memory_unit([p for c in checks for p in (c.current, c.tuned)])
    for check in checks:
        for label, p in (("current", check.current), ("tuned", check.tuned)):
            o = p.outcome
            rows.append([label, check.part, check.partitions, f"{o.busy:.4f}",
                         f"{o.memory_bytes / size:.2f}", f"{o.peak_bytes / size:.2f}",
                         "yes" if goal.meets(o) else "no"])  # fmt: skip
        if check.tuned.values == check.current.values:
            verdicts.append(f"{check.part}: the current settings are the tuned ones")
        else:
            better = goal.better(check.tuned.outcome, check.current.outcome)
            verdict = "better" if better else "no better"
            verdicts.append(f"{check.part}: the tuned settings do {verdict} than the current ones")
    headers = ["settings", "part", "partitions", "GPU busy", f"memory {unit}", f"peak {unit}",
               "meets goal"]  # fmt: skip
    return "Tuned against current:\n" + _indented(headers, rows) + "\n" + "\n".join(verdicts)
