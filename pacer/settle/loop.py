"""The settle loop over a timed series: options, result, live sampling and replay."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from pacer.settle.detector import (
    DEFAULT_INTERVAL_S,
    DEFAULT_TIMEOUT_S,
    DEFAULT_WINDOW_S,
    GIB,
    PROGRESS_EVERY_S,
    Reason,
    SettleDetector,
    Trend,
    gib,
)
from pacer.settle.held import Held, HeldCheck
from pacer.settle.sources import (
    ProcessCheck,
    ProcessInfo,
    Sampler,
    TimedSample,
    no_processes,
)


@dataclass(frozen=True)
class SettleOptions:
    """How to judge: sizes in bytes, times in seconds; ``timeout_s`` 0 checks once."""

    tolerance_bytes: int = 2 * GIB
    window_s: float = DEFAULT_WINDOW_S
    interval_s: float = DEFAULT_INTERVAL_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    baseline_bytes: int | None = None
    gpu_baseline_bytes: int | None = None  # only ever remembered, never given

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {self.interval_s}")
        if not self.timeout_s >= 0:
            raise ValueError(f"timeout_s must be >= 0, got {self.timeout_s}")
        SettleDetector(self.baseline_bytes, self.tolerance_bytes, self.window_s)  # validates


@dataclass(frozen=True)
class Result:
    """How a settle run ended; the flags, trends, blockers and held memory are those of the
    last sample (``held`` None: not looked for)."""

    settled: bool
    reason: Reason
    settled_at_s: float | None
    samples: list[TimedSample]
    host_settled: bool = False
    gpu_settled: bool = True  # also when GPU memory is not sampled
    trend: Trend | None = None
    gpu_trend: Trend | None = None
    blockers: list[ProcessInfo] = dataclasses.field(default_factory=list)
    held: Held | None = None

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "settled": self.settled,
            "settled_at_s": None if self.settled_at_s is None else round(self.settled_at_s, 3),
            "reason": self.reason,
            "samples": [s.as_dict() for s in self.samples],
        }
        if self.held is not None:
            out["held_by_orphans"] = self.held.as_json()
        return out


def settle(
    series: Iterable[TimedSample],
    options: SettleOptions,
    processes: ProcessCheck = no_processes,
    progress: Callable[[str], None] | None = None,
    held: HeldCheck | None = None,
) -> Result:
    """Judge ``series`` until memory and processes have settled or the series ends.

    GPU memory, where sampled, must settle by the same rules as host memory (against the
    remembered GPU baseline); a sample without it is judged on host memory alone. Host memory
    is judged less what is kept for the next pacer (`TimedSample.judged_bytes`). The reason
    given is host memory's. While ``held`` finds a dead pacer's pool blocks mapped by a process
    that outlived it, memory has not settled, however flat it is: the process must end first.
    """
    host = SettleDetector(options.baseline_bytes, options.tolerance_bytes, options.window_s)
    gpu = SettleDetector(options.gpu_baseline_bytes, options.tolerance_bytes, options.window_s)
    taken: list[TimedSample] = []
    verdict, gpu_settled, gpu_seen, blockers = None, True, False, []
    holding: Held | None = None
    next_progress_s = 0.0
    for sample in series:
        if taken and sample.t_s <= taken[-1].t_s:
            continue
        taken.append(sample)
        verdict = host.add(sample.t_s, sample.judged_bytes)
        gpu_settled = True
        if sample.gpu_used_bytes is not None:
            gpu_seen = True
            gpu_settled = gpu.add(sample.t_s, sample.gpu_used_bytes) is not None
        blockers = processes()
        holding = None if held is None else held()
        if verdict is not None and gpu_settled and not blockers and not _holds(holding):
            break
        if progress is not None and sample.t_s >= next_progress_s:
            next_progress_s = (sample.t_s // PROGRESS_EVERY_S + 1) * PROGRESS_EVERY_S
            line = f"{sample.t_s:.0f} s: used {gib(sample.used_bytes)}"
            if sample.kept_bytes:
                line += f" ({gib(sample.kept_bytes)} of it kept for the next pacer)"
            line += f", {host.trend().words()}"
            if sample.gpu_used_bytes is not None:
                line += f"; GPU used {gib(sample.gpu_used_bytes)}, {gpu.trend().words()}"
            line += "".join(f"; waiting for {p}" for p in blockers)
            if holding is not None and holding.holders:
                line += f"; {holding.words()}"
            progress(line)
    settled = verdict is not None and gpu_settled and not blockers and not _holds(holding)
    return Result(
        settled=settled,
        reason=verdict.reason if settled and verdict is not None else "timeout",
        settled_at_s=taken[-1].t_s if settled else None,
        samples=taken,
        host_settled=verdict is not None,
        gpu_settled=gpu_settled,
        trend=host.trend() if taken else None,
        gpu_trend=gpu.trend() if gpu_seen else None,
        blockers=blockers,
        held=holding,
    )


def _holds(held: Held | None) -> bool:
    return held is not None and bool(held.holders)


def _sample_every(
    options: SettleOptions,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    sampler: Sampler,
) -> Iterator[TimedSample]:
    """Samples at 0, interval, 2·interval … and a last one at the timeout; ticks missed while
    sampling are skipped rather than caught up."""
    start = clock()
    while True:
        t_s = clock() - start
        sample = sampler.sample()
        yield TimedSample(t_s, sample.used_bytes, sample.gpu_used_bytes, sample.kept_bytes)
        if t_s >= options.timeout_s:
            return
        next_s = min(
            (math.floor(t_s / options.interval_s) + 1) * options.interval_s, options.timeout_s
        )
        sleep(max(0.0, next_s - (clock() - start)))


def run(
    options: SettleOptions,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    sampler: Sampler,
    processes: ProcessCheck = no_processes,
    progress: Callable[[str], None] | None = None,
    held: HeldCheck | None = None,
) -> Result:
    """Sample every ``options.interval_s`` until settled or ``options.timeout_s`` is reached."""
    series = _sample_every(options, clock, sleep, sampler)
    return settle(series, options, processes, progress, held)


def replay(
    series: list[TimedSample], options: SettleOptions, progress: Callable[[str], None] | None = None
) -> Result:
    """Judge a recorded series on its own timing, up to the timeout, without process checks."""
    return settle((s for s in series if s.t_s <= options.timeout_s), options, progress=progress)
