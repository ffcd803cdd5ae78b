"""What a simulation run holds between events: the event queue, the queues and counters of the
pipeline, and the trace (``pacer.sim.engine`` moves them on)."""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from pacer.control.policy import AgesView, Observation, SynthesisParts


class EventKind(IntEnum):
    """What happens at an event; syntheses ending are not events (the CPU share sets when)."""

    ARRIVAL = 0  # a job arrives
    GPU_DONE = 1  # a GPU worker ends its partition
    WAKE = 2  # the time the policy asked to decide again
    PHASE = 3  # the CPU speed changes: synthesis progress rates change
    DEATH = 4  # a GPU worker dies
    SYNTHESIS_FAILURE = 5  # the oldest synthesis running fails
    HANG_FAILURE = 6  # a hung synthesis times out
    OUTAGE = 7  # a GPU worker leaves
    RETURN = 8  # ... and comes back
    HANDOFF = 9  # a dispatched partition reaches the synthesis processes
    VERIFIED = 10  # a verify thread ends the check of a proof


class Event(NamedTuple):
    """One event: ``t`` in simulated seconds; ``seq`` orders events of one time as pushed.

    ``arg`` is the GPU worker (GPU_DONE, DEATH, OUTAGE, RETURN), the decision's number (WAKE),
    the job (ARRIVAL, its place in the order of arrivals) or the synthesis's (HANG_FAILURE,
    HANDOFF); ``pid`` is the partition on the GPU (GPU_DONE), handed off (HANDOFF) or checked
    (VERIFIED).
    """

    t: float
    seq: int
    kind: EventKind
    arg: int
    pid: int


class EventQueue:
    """Events by time, those of one time in the order they were pushed."""

    def __init__(self) -> None:
        self._heap: list[Event] = []
        self._seq = 0

    def push(self, t: float, kind: EventKind, arg: int = 0, pid: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, Event(t, self._seq, kind, arg, pid))

    def next_t(self) -> float:
        """When the next event happens (s); infinity when none is left."""
        return self._heap[0].t if self._heap else math.inf

    def pop(self) -> Event:
        return heapq.heappop(self._heap)


@dataclass
class Trace:
    """State after each event, for measurements and plots (times in s)."""

    t: list[float] = field(default_factory=list)
    busy: list[int] = field(default_factory=list)
    available: list[int] = field(default_factory=list)  # 1 while any partition is outstanding
    ready: list[int] = field(default_factory=list)
    inflight: list[int] = field(default_factory=list)
    synthesizing: list[int] = field(default_factory=list)
    interval_s: list[float] = field(default_factory=list)
    workers: list[int] = field(default_factory=list)  # live GPU workers
    backlog: list[int] = field(default_factory=list)  # partitions waiting for dispatch


# A synthesis running: (work done at its end, dispatch number, partition, start time in s).
Running = tuple[float, int, int, float]


@dataclass
class RunState:
    """The pipeline of one run: partitions by place, GPU workers, syntheses and counters.

    Syntheses share the CPU: ``work_done`` advances at the progress rate of each one, so a
    synthesis started at ``work_done`` w with work x ends when ``work_done`` reaches w + x.
    """

    workers: int  # GPU workers at the start
    total_partitions: int  # of all the jobs
    backlog: deque[int] = field(default_factory=deque)
    ready: deque[int] = field(default_factory=deque)
    next_pid: int = 0
    arrived_jobs: int = 0
    # GPU workers: idle ones popped from the end; worker → (partition, start, end) while
    # busy, oldest start first.
    idle_workers: list[int] = field(init=False)
    last_end: list[float | None] = field(init=False)
    on_gpu: dict[int, tuple[int, float, float]] = field(default_factory=dict)
    gpu_starts: list[float] = field(default_factory=list)  # of the busy workers, ascending
    dead: set[int] = field(default_factory=set)
    gaps: list[tuple[float, float]] = field(default_factory=list)
    service: npt.NDArray[np.float64] = field(init=False)  # GPU time of each partition (s)
    first_gpu: float | None = None
    # Syntheses: a heap by end, those dispatched in order, and those waiting for a worker.
    work_done: float = 0.0
    running: list[Running] = field(default_factory=list)
    # Syntheses dispatched and not ended, failed or timed out: number → dispatch time, in order.
    started: OrderedDict[int, float] = field(default_factory=OrderedDict)
    queued: deque[tuple[int, int]] = field(default_factory=deque)  # (partition, number)
    waited: set[int] = field(default_factory=set)  # numbers that waited for a process
    hung: dict[int, tuple[int, float]] = field(default_factory=dict)  # number → (pid, start)
    handing_off: int = 0  # dispatched, not yet at the synthesis processes
    verifying: int = 0  # proofs checked now
    to_verify: deque[tuple[int, float]] = field(default_factory=deque)  # (partition, since)
    checks_take_workers: bool = False  # checks take turns on the synthesis workers
    dispatches: int = 0
    busy: int = 0
    inflight: int = 0
    completed: int = 0
    outstanding: int = 0
    peak_inflight: int = 0
    peak_ready: int = 0
    violations: int = 0
    wake_gen: int = 0
    trace: Trace = field(default_factory=Trace)

    def __post_init__(self) -> None:
        self.idle_workers = list(range(self.workers - 1, -1, -1))
        self.last_end = [None] * self.workers
        self.service = np.zeros(self.total_partitions)

    @property
    def live_workers(self) -> int:
        return self.workers - len(self.dead)

    @property
    def on_workers(self) -> int:
        """What holds a synthesis worker: syntheses running or hung, and checks where they
        take turns on the workers."""
        checks = self.verifying if self.checks_take_workers else 0
        return len(self.running) + len(self.hung) + checks

    def check_is_next(self) -> bool:
        """Whether a check waits that was handed to the synthesis workers before any synthesis
        that waits for one (where checks take turns on them)."""
        if not self.to_verify:
            return False
        return not self.queued or self.to_verify[0][1] <= self.started[self.queued[0][1]]

    @property
    def synthesizing(self) -> int:
        """Syntheses running, hung, on their way to the processes, or waiting for one."""
        return len(self.running) + len(self.hung) + len(self.queued) + self.handing_off

    def done(self) -> None:
        """A partition is done (proved, and checked where it was to be): its bytes come back."""
        self.inflight -= 1
        self.outstanding -= 1
        self.completed += 1

    def start_synthesis(self, pid: int, number: int, work: float, now: float) -> None:
        """Start synthesis number ``number`` of partition ``pid``: ``work`` seconds alone."""
        heapq.heappush(self.running, (self.work_done + work, number, pid, now))

    def ended(self, number: int, began: float, now: float) -> tuple[float, SynthesisParts]:
        """Synthesis ``number``, begun on a process at ``began``, ended at ``now``: seconds
        from its dispatch, and how they divide (its trip out known only where it did not
        wait for a process; nothing comes back through an event loop here)."""
        dispatched = self.started.pop(number)
        out = None if number in self.waited else began - dispatched
        self.forget(number)
        return now - dispatched, SynthesisParts(compute_s=now - began, back_s=0.0, out_s=out)

    def forget(self, number: int) -> None:
        """Synthesis ``number`` ended, failed or timed out."""
        self.started.pop(number, None)
        self.waited.discard(number)

    def synthesis_ages(self, now: float) -> tuple[float, ...]:
        """Ages of the oldest syntheses running, oldest first (s)."""
        oldest = itertools.islice(self.started.values(), Observation.SYNTHESIS_AGES)
        return tuple(now - at for at in oldest)

    def gpu_started(self, at: float) -> None:
        self.gpu_starts.append(at)  # the clock only moves forward: still ascending

    def gpu_ended(self, at: float) -> None:
        del self.gpu_starts[bisect.bisect_left(self.gpu_starts, at)]

    def gpu_busy_ages(self, now: float) -> AgesView:
        """Ages of the partitions on the busy workers, oldest first (s), read as needed."""
        return AgesView(self.gpu_starts, now)

    def record(self, now: float, interval_s: float) -> None:
        """Append the state now to the trace; ``interval_s`` is the policy's."""
        trace = self.trace
        trace.t.append(now)
        trace.busy.append(self.busy)
        trace.available.append(1 if self.outstanding > 0 else 0)
        trace.ready.append(len(self.ready))
        trace.inflight.append(self.inflight)
        trace.synthesizing.append(self.synthesizing)
        trace.interval_s.append(interval_s)
        trace.workers.append(self.live_workers)
        trace.backlog.append(len(self.backlog))
