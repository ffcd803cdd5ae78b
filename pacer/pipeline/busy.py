"""Busy time per GPU: busy while any of its workers proves, idle when none does; the per-GPU
reads the service shows."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
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

    def ratio(self, busy_since: float | None) -> float:
        now = self._clock()
        since = max(self._started, now - self._window_s)
        if now <= since:
            return 0.0
        busy = sum(v for second, v in self._buckets.items() if second >= int(since))
        if busy_since is not None:
            busy += now - max(busy_since, since)
        return min(1.0, busy / (now - since))


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
