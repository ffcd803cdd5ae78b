"""What the synthesis side of a running service does between a process's end and its next
start: how late the event loop runs, how full the executor is, how busy its threads are.

Used by `bench.gpu_arms` to tell where a synthesis-bound host's processes idle: a loop that
hears of an end late, a controller that dispatches too few, or threads that wait on the
processes' hand-off.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from typing import Any

from bench.service import quantile

TICK_S = 0.005  # the sampler's period


class LoopProbe:
    """Samples the event loop's lateness and the pipeline's syntheses in flight every
    ``TICK_S``, and times every call of the workload's ``synthesize`` on its thread.

    ``pipeline``: the service's pipeline (its ``synthesizing`` count is read);
    ``workload``: the object whose ``synthesize`` the pipeline's threads call (wrapped here).
    """

    def __init__(self, pipeline: Any, workload: Any) -> None:
        self._pipeline = pipeline
        # (when, lateness s, syntheses in flight, verifications in flight)
        self.samples: list[tuple[float, float, int, int]] = []
        self.calls: list[tuple[float, float]] = []  # (began, ended) of each synthesize call
        self._open: dict[int, float] = {}  # thread id → when its call began
        self._task: asyncio.Task[None] | None = None
        synthesize = workload.synthesize

        def timed(*args: Any) -> Any:
            began = time.perf_counter()
            self._open[threading.get_ident()] = began
            try:
                return synthesize(*args)
            finally:
                del self._open[threading.get_ident()]
                self.calls.append((began, time.perf_counter()))

        workload.synthesize = timed

    def start(self) -> None:
        """Start sampling on the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._sample())

    async def stop(self) -> None:
        """Stop sampling."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _sample(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(TICK_S)
            now = time.perf_counter()
            p = self._pipeline
            self.samples.append((now, now - before - TICK_S, p.synthesizing, p.verifying))

    def summary(self, start: float, end: float, processes: int, queue: int) -> dict[str, Any]:
        """Over [start, end] (perf_counter seconds): the loop's lateness (p50, p99, most, ms);
        the share of samples with fewer syntheses in flight than ``processes`` (a process may
        idle: ``short``) and than ``processes + queue`` (``queue_short``); the mean in flight;
        the mean verifications on the same threads (``verifying_mean``); and the share of the
        ``processes`` threads' time spent in ``synthesize`` (``thread_busy``)."""
        window = [(lag, n, v) for at, lag, n, v in self.samples if start <= at <= end]
        lags = [max(0.0, lag) * 1000 for lag, _, _ in window]
        counts = [n for _, n, _ in window]
        verifying = [v for _, _, v in window]
        spans = self.calls + [(b, end) for b in list(self._open.values())]  # open: still running
        busy = sum(max(0.0, min(e, end) - max(b, start)) for b, e in spans)
        span = max(end - start, 1e-9)
        return {
            "loop_lag_p50_ms": quantile(lags, 0.5) if lags else 0.0,
            "loop_lag_p99_ms": quantile(lags, 0.99) if lags else 0.0,
            "loop_lag_max_ms": max(lags) if lags else 0.0,
            "short": sum(n < processes for n in counts) / len(counts) if counts else 0.0,
            "queue_short": (
                sum(n < processes + queue for n in counts) / len(counts) if counts else 0.0
            ),
            "synthesizing_mean": statistics.fmean(counts) if counts else 0.0,
            "verifying_mean": statistics.fmean(verifying) if verifying else 0.0,
            "thread_busy": busy / (processes * span),
        }


IDLE_KEYS = (
    ("thread_busy", "threads busy", 3),
    ("service_synthesis_busy", "workers busy (service)", 3),
    ("short", "fewer in flight than processes", 3),
    ("queue_short", "queue not full", 3),
    ("synthesizing_mean", "in flight, syntheses", 2),
    ("verifying_mean", "verifying", 2),
    ("queue_allowed", "queue allowed", 1),
    ("tokens_dry", "tokens dry", 3),
    ("loop_lag_p50_ms", "loop late p50 ms", 2),
    ("loop_lag_p99_ms", "loop late p99 ms", 1),
    ("loop_lag_max_ms", "loop late max ms", 0),
)


def idle_table(results: list[dict[str, Any]], markdown: bool = False) -> str:
    """Per size and arm of `bench.gpu_arms`' runs: the mean over the rounds ± its 95 %
    half-width of each `LoopProbe` measure (runs saved before the probe: "-")."""
    from bench.stats import interval
    from pacer.cli.table import render

    rows = []
    for n in sorted({r["processes"] for r in results}, reverse=True):
        for arm in dict.fromkeys(r["arm"] for r in results if r["processes"] == n):
            runs = [r for r in results if r["processes"] == n and r["arm"] == arm]
            cells = []
            for key, _, digits in IDLE_KEYS:
                if any(key not in r for r in runs):
                    cells.append("-")
                    continue
                mean, half = interval([float(r[key]) for r in runs])
                cells.append(f"{mean:.{digits}f} ± {half:.{digits}f}")
            rows.append((n, arm, len(runs), *cells))
    headers = ("processes", "arm", "runs", *(title for _, title, _ in IDLE_KEYS))
    return render(headers, rows, markdown=markdown)
