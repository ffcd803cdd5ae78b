"""Busy time per GPU (busy while any of its workers proves, idle when none does) and of the
synthesis workers (each one's time inside a synthesis); the per-GPU reads the service shows."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class BusyMeter:
    """A GPU's busy time, in total and as a fraction of the trailing ``window_s``.

    Intervals are added when they end, into per-second buckets. The reader passes in an interval
    still running.
    """

    def __init__(self, clock: Callable[[], float], window_s: int = 60) -> None:
        self._clock = clock
        self._window_s = window_s
        self._started = clock()
        self._buckets: dict[int, float] = {}  # whole second → busy seconds within it
        self.total_s = 0.0

    def add(self, start: float, end: float) -> None:
        self.total_s += end - start
        t = start
        while t < end:
            second = int(t)
            edge = min(end, second + 1.0)
            self._buckets[second] = self._buckets.get(second, 0.0) + edge - t
            t = edge
        if len(self._buckets) > self._window_s + 2:
            horizon = int(end) - self._window_s - 1
            for second in [k for k in self._buckets if k < horizon]:
                del self._buckets[second]

    def busy_seconds(self, busy_since: float | None) -> float:
        ongoing = 0.0 if busy_since is None else max(0.0, self._clock() - busy_since)
        return self.total_s + ongoing

    def since(self, moment: float) -> float:
        """Seconds from ``moment`` to now, on the meter's clock (0 if it is still to come)."""
        return max(0.0, self._clock() - moment)

    def window(self) -> tuple[float, float, float]:
        """(now, the trailing window's start, the busy seconds of the intervals that ended
        within it) on the meter's clock."""
        now = self._clock()
        since = max(self._started, now - self._window_s)
        busy = sum(v for second, v in self._buckets.items() if second >= int(since))
        return now, since, busy

    def ratio(self, busy_since: float | None) -> float:
        now, since, busy = self.window()
        if now <= since:
            return 0.0
        if busy_since is not None:
            busy += now - max(busy_since, since)
        return min(1.0, busy / (now - since))


class WorkersBusy:
    """The busy time of ``workers`` workers that each run one call at a time (the synthesis
    threads; each one feeds a process where synthesis runs in processes): worker-seconds in
    total, and as a share of the workers' time over the trailing ``window_s``. Calls are added
    when they end; the reader passes the starts of those still running (clock seconds).

    >>> t = [0.0]
    >>> busy = WorkersBusy(lambda: t[0], workers=2)
    >>> t[0] = 10.0
    >>> busy.add(0.0, 10.0)  # one worker busy all along, the other from 5 s on
    >>> busy.ratio([5.0]), busy.seconds([5.0])
    (0.75, 15.0)
    """

    def __init__(self, clock: Callable[[], float], workers: int, window_s: int = 60) -> None:
        self._clock = clock
        self._meter = BusyMeter(clock, window_s)
        self.workers = workers

    def add(self, start: float, end: float) -> None:
        """A call that ran from ``start`` to ``end`` (clock seconds)."""
        self._meter.add(start, max(start, end))

    def seconds(self, running: Iterable[float]) -> float:
        """Worker-seconds busy so far, the calls still running (started at ``running``)
        included."""
        now = self._clock()
        return self._meter.total_s + sum(max(0.0, now - start) for start in running)

    def ratio(self, running: Iterable[float]) -> float:
        """The workers' busy share of the trailing window, in [0, 1]; 0 before any time
        has passed."""
        now, since, busy = self._meter.window()
        if now <= since or self.workers <= 0:
            return 0.0
        busy += sum(max(0.0, now - max(start, since)) for start in running)
        return min(1.0, busy / ((now - since) * self.workers))


@dataclass
class GpuBusy:
    """A device's busy time, shared by its workers' threads (under ``lock``)."""

    label: int
    meter: BusyMeter
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    active: int = 0  # workers proving on it now
    busy_since: float | None = None  # when ``active`` last rose from 0
    last_end: float | None = None  # when it last fell to 0

    def begin(self, now: float) -> float | None:
        """Mark a worker's partition started; return the idle gap this ends, if any."""
        with self.lock:
            self.active += 1
            if self.active > 1:
                return None
            self.busy_since = now
            return None if self.last_end is None else now - self.last_end

    def end(self, now: float) -> None:
        with self.lock:
            self.active -= 1
            if self.active == 0 and self.busy_since is not None:
                self.meter.add(self.busy_since, now)
                self.busy_since = None
                self.last_end = now

    def ratio(self) -> float:
        with self.lock:
            return self.meter.ratio(self.busy_since)

    def busy_seconds(self) -> float:
        with self.lock:
            return self.meter.busy_seconds(self.busy_since)

    def idle_s(self) -> float | None:
        """Seconds the device has been idle, the current gap so far: 0 while a worker proves on
        it; None before its first partition."""
        with self.lock:
            if self.active:
                return 0.0
            return None if self.last_end is None else self.meter.since(self.last_end)


class _Provers(Protocol):
    @property
    def gpus(self) -> dict[int, GpuBusy]: ...

    @property
    def workers(self) -> Sequence[_OnGpu]: ...


class _OnGpu(Protocol):
    @property
    def gpu(self) -> GpuBusy: ...


class GpuReadings:
    """Per-GPU reads of the proving workers in ``provers``, for the service's status and
    metrics: which GPUs, how many workers on each, busy share, busy seconds, idle gap."""

    provers: _Provers

    @property
    def gpus(self) -> list[int]:
        """The label of every GPU proving (device index; worker index when on the CPU)."""
        return list(self.provers.gpus)

    def workers_on(self, gpu: int) -> int:
        return sum(w.gpu.label == gpu for w in self.provers.workers)

    def busy_ratio(self, gpu: int) -> float:
        """Fraction of the trailing minute GPU ``gpu`` had a partition on it."""
        return self.provers.gpus[gpu].ratio()

    def busy_seconds(self, gpu: int) -> float:
        return self.provers.gpus[gpu].busy_seconds()

    def idle_s(self, gpu: int) -> float | None:
        """How long GPU ``gpu`` has been idle (s): 0 while busy, None before its first work."""
        return self.provers.gpus[gpu].idle_s()
