"""A grid of controller settings swept on a recording, its frontier, and the point a goal picks
(`pacer tune`).

The grid names settings as ``PACER_CONTROLLER__*`` does (``kp``, ``ki``, ``target_ready_s``, or
any other field of `ControllerSettings`), and each point is checked by that model: the sweep
holds whatever the settings mean.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import ValidationError

from pacer.config import ControllerSettings, Settings
from pacer.host.memory import bytes_text
from pacer.sim.recording import Recording
from pacer.sim.replay import HostShape, Outcome, evaluate

DEFAULT_KP = (2.0, 4.0, 8.0)  # the documented safe range of kp (docs/controller.md, "Tuning")
DEFAULT_KI = (0.0, 0.1, 0.25)  # and of ki
BUFFER_LEADS = (0.0, 0.25, 0.5, 1.0)  # target_ready_s, in mean synthesis times
_READY_DEFAULT = ControllerSettings.model_fields["target_ready"].default
READY_FLOORS = (_READY_DEFAULT / 2, _READY_DEFAULT)  # target_ready: half the default, and it
_NEAR_BALANCE_DEFAULT = ControllerSettings.model_fields["near_balance_idle"].default
# near_balance_idle: off, the default, and five times it (a thinner near-balance buffer) ...
NEAR_BALANCE_IDLE = (0.0, _NEAR_BALANCE_DEFAULT, 5 * _NEAR_BALANCE_DEFAULT)
NEAR_BALANCE_RATIO = 2.0  # ... swept where the synthesis slots finish under this × the GPUs
# live_floor_longest: eight lead times, and four of the longest syntheses (D216) ...
LIVE_FLOOR_LONGEST = (0.0, 4.0)
WIDE_QUANTILE, WIDE_RATIO = 0.99, 2.0  # ... swept where the 99th percentile synthesis passes
# twice the mean: only there can four of the longest outlast eight lead times
BUSY_TIE = 0.0005  # busy ratios closer than this are as busy: the goal then takes less memory
PREFIX = "PACER_CONTROLLER__"

Values = dict[str, Any]
"""A point of the grid: controller setting → value."""


class GridError(ValueError):
    """A grid that names no controller setting, or a value its model refuses."""


class GoalError(ValueError):
    """No point of the grid meets the goal."""


@dataclass(frozen=True)
class Grid:
    """The values swept for each named controller setting; every combination is a point."""

    axes: tuple[tuple[str, tuple[Any, ...]], ...]

    def points(self) -> list[Values]:
        names = [name for name, _ in self.axes]
        combos = itertools.product(*(values for _, values in self.axes))
        return [dict(zip(names, combo, strict=True)) for combo in combos]

    def describe(self) -> str:
        """``kp 0, 0.5 × ki 0, 0.2: 4 points``."""
        axes = " × ".join(f"{name} {', '.join(map(value_text, v))}" for name, v in self.axes)
        return f"{axes}: {len(self.points())} points"


def value_text(value: Any) -> str:
    """A value as a grid or an environment file writes it: ``0.5``, ``0``, ``pi``."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def default_grid(lead_s: float, near_balance: bool = False, wide: bool = False) -> Grid:
    """kp DEFAULT_KP × ki DEFAULT_KI × target_ready_s BUFFER_LEADS of ``lead_s`` (the mean
    synthesis time of the recording, s), to three significant figures, × target_ready
    READY_FLOORS; with ``near_balance``, × near_balance_idle NEAR_BALANCE_IDLE too; with
    ``wide`` (synthesis times spread widely, `wide_spread`), × live_floor_longest
    LIVE_FLOOR_LONGEST."""
    buffers = tuple(dict.fromkeys(float(f"{share * lead_s:.3g}") for share in BUFFER_LEADS))
    axes: list[tuple[str, tuple[Any, ...]]] = [
        ("kp", DEFAULT_KP), ("ki", DEFAULT_KI), ("target_ready_s", buffers),
        ("target_ready", READY_FLOORS),
    ]  # fmt: skip
    if near_balance:
        axes.append(("near_balance_idle", NEAR_BALANCE_IDLE))
    if wide:
        axes.append(("live_floor_longest", LIVE_FLOOR_LONGEST))
    return Grid(tuple(axes))


def wide_spread(recording: Recording) -> bool:
    """Whether the recording's synthesis times spread widely: the ``WIDE_QUANTILE`` quantile
    beyond ``WIDE_RATIO`` × their mean (a heavy tail, partitions of several sizes), where how
    long the live floor remembers may matter (``live_floor_longest``, D216)."""
    syn = recording.synthesis_s
    mean = float(np.mean(syn)) if len(syn) else 0.0
    return mean > 0 and float(np.quantile(syn, WIDE_QUANTILE)) > WIDE_RATIO * mean


def near_balance(recording: Recording, host: HostShape) -> bool:
    """Whether ``host``'s synthesis slots (cores ÷ threads per synthesis) finish fewer than
    ``NEAR_BALANCE_RATIO`` times the partitions a second its GPU workers prove, at the
    recording's mean synthesis and GPU times: where the near-balance buffer may weigh in."""
    syn, gpu = recording.mean_synthesis_s, float(np.mean(recording.gpu_s))
    if not syn > 0 or not gpu > 0:
        return False
    return host.synthesis_slots / syn < NEAR_BALANCE_RATIO * host.workers / gpu


def apply(settings: Settings, values: Mapping[str, Any]) -> Settings:
    """``settings`` with these controller settings, checked by their model; GridError naming
    the setting and the rule otherwise."""
    try:
        controller = ControllerSettings.model_validate({**settings.controller.model_dump(),
                                                        **values})  # fmt: skip
    except ValidationError as exc:
        err = exc.errors()[0]
        where = "".join(f"{p}: " for p in err["loc"])
        raise GridError(where + str(err["msg"]).removeprefix("Value error, ")) from None
    return settings.model_copy(update={"controller": controller})


def parse_grid(specs: Sequence[str], base: Grid, settings: Settings) -> Grid:
    """``base`` with each ``NAME=V1,V2,...`` of ``specs`` sweeping that setting instead (a name
    it does not sweep is added): NAME is a controller setting (``kp``, or
    ``PACER_CONTROLLER__KP``). GridError naming the spec and the rule."""
    axes = dict(base.axes)
    named: set[str] = set()
    fields = list(ControllerSettings.model_fields)
    for spec in specs:
        raw_name, sep, raw_values = spec.partition("=")
        name = raw_name.strip().lower().removeprefix(PREFIX.lower())
        if not sep or not name:
            raise GridError(f"--grid {spec}: takes NAME=V1,V2,... (kp=0,0.5,1)")
        if name not in fields:
            raise GridError(f"--grid {spec}: {raw_name.strip()} is not a controller setting "
                            f"({PREFIX}*); they are {', '.join(fields)}")  # fmt: skip
        if name in named:
            raise GridError(f"--grid {spec}: {name} is named twice; give its values once")
        texts = [text.strip() for text in raw_values.split(",")]
        if not all(texts):
            raise GridError(f"--grid {spec}: a value is empty; separate values with commas")
        try:
            values = [getattr(apply(settings, {name: text}).controller, name) for text in texts]
        except GridError as exc:
            raise GridError(f"--grid {spec}: {exc}") from None
        named.add(name)
        axes[name] = tuple(dict.fromkeys(values))
    grid = Grid(tuple(axes.items()))
    for point in grid.points():
        try:
            apply(settings, point)
        except GridError as exc:
            shown = " ".join(f"{k}={value_text(v)}" for k, v in point.items())
            raise GridError(f"--grid: the point {shown} is refused: {exc}") from None
    return grid


@dataclass(frozen=True)
class Point:
    """A point of the grid and what its replays came to."""

    values: Values
    outcome: Outcome


def sweep(
    points: Sequence[Values],
    recording: Recording,
    host: HostShape,
    settings: Settings,
    seeds: int,
    progress: Callable[[int, int], None] | None = None,
    processes: int = 1,
) -> list[Point]:
    """Each point replayed on ``recording`` (``seeds`` seeds), in order; with ``processes``
    > 1, that many at once, in worker processes. ``progress(done, total)`` after each."""
    tasks = [(recording, host, apply(settings, values), seeds) for values in points]
    outcomes: list[Outcome] = []
    if processes <= 1:
        for task in tasks:
            outcomes.append(evaluate(*task))
            if progress is not None:
                progress(len(outcomes), len(tasks))
    else:
        context = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(processes, mp_context=context) as pool:
            for outcome in pool.map(_evaluate, tasks):
                outcomes.append(outcome)
                if progress is not None:
                    progress(len(outcomes), len(tasks))
    return [Point(v, o) for v, o in zip(points, outcomes, strict=True)]


def _evaluate(task: tuple[Recording, HostShape, Settings, int]) -> Outcome:
    return evaluate(*task)


def frontier(points: Sequence[Point]) -> list[Point]:
    """The points no other beats on both counts (as busy or more, with as little memory or
    less, and better on one), by memory; of points equal on both, the first."""
    ranked = sorted(points, key=lambda p: (p.outcome.memory_bytes, -p.outcome.busy))
    out: list[Point] = []
    for point in ranked:
        if not out or point.outcome.busy > out[-1].outcome.busy:
            out.append(point)
    return out


@dataclass(frozen=True)
class Goal:
    """The trade an operator asks for: ``min-memory``, the least mean memory in flight with the
    GPUs busy at least ``bound`` (a share); ``max-busy``, the busiest with mean memory in flight
    at most ``bound`` (bytes)."""

    kind: Literal["min-memory", "max-busy"]
    bound: float

    def describe(self) -> str:
        if self.kind == "min-memory":
            return f"the least mean memory in flight with the GPUs busy >= {self.bound:g}"
        return f"the busiest GPUs with mean memory in flight <= {bytes_text(self.bound)}"

    def meets(self, outcome: Outcome) -> bool:
        if self.kind == "min-memory":
            return outcome.busy >= self.bound
        return outcome.memory_bytes <= self.bound

    def better(self, a: Outcome, b: Outcome) -> bool:
        """Whether ``a`` serves the goal better than ``b``: it meets it where ``b`` does not,
        or both meet it and ``a`` takes less memory (min-memory) or keeps the GPUs busier
        (max-busy; as busy within BUSY_TIE, with less memory)."""
        if not self.meets(a) or not self.meets(b):
            return self.meets(a) and not self.meets(b)
        if self.kind == "min-memory" or abs(a.busy - b.busy) <= BUSY_TIE:
            return a.memory_bytes < b.memory_bytes * (1 - 1e-9)
        return a.busy > b.busy

    def choose(self, points: Sequence[Point]) -> Point:
        """The point that serves the goal best (the first in grid order of those equal);
        GoalError naming the flag, the rule and the nearest point where none meets it."""
        meeting = [p for p in points if self.meets(p.outcome)]
        if self.kind == "min-memory":
            if meeting:
                return min(meeting, key=lambda p: (p.outcome.memory_bytes, -p.outcome.busy))
            best = max(points, key=lambda p: p.outcome.busy)
            raise GoalError(
                f"--min-busy {self.bound:g}: no point of the grid keeps the GPUs busy >= "
                f"{self.bound:g} (the busiest, {point_text(best)}, {best.outcome.busy:.4f}); "
                "lower --min-busy, or widen --grid"
            )
        if meeting:
            busiest = max(p.outcome.busy for p in meeting)
            tied = [p for p in meeting if p.outcome.busy >= busiest - BUSY_TIE]
            return min(tied, key=lambda p: p.outcome.memory_bytes)
        least = min(points, key=lambda p: p.outcome.memory_bytes)
        raise GoalError(
            f"--max-memory {bytes_text(self.bound)}: no point of the grid holds mean memory in "
            f"flight <= {bytes_text(self.bound)} (the least, {point_text(least)}, "
            f"{bytes_text(least.outcome.memory_bytes)}); raise --max-memory, or widen --grid"
        )


def point_text(point: Point) -> str:
    """``kp=0 ki=0.2 target_ready_s=1.5``."""
    return " ".join(f"{k}={value_text(v)}" for k, v in point.values.items())


def lead_of(recording: Recording) -> float:
    """The mean synthesis time of ``recording`` (s): what the default buffers are shares of."""
    lead = recording.mean_synthesis_s
    return lead if math.isfinite(lead) and lead > 0 else 1.0
