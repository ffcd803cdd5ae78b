"""Discrete-event simulation of the pipeline on a virtual clock.

Model: jobs of N partitions arrive (all at once, or Poisson); the policy decides when each
partition is dispatched to synthesis; syntheses share the CPU (processor sharing: with n running,
each progresses at min(1, cores ÷ (n × threads)), so a synthesis takes its sampled duration ×
max(1, n × threads ÷ cores)); synthesized partitions wait in the ready queue; W GPU workers take
them in order. A partition holds its bytes from dispatch until its GPU work ends; as in the
pipeline, a dispatch the memory budget cannot hold is refused (the policy sees the room it has
left, ``Observation.budget_free``, and what it asks beyond counts as a budget violation). A
policy with a synthesis worker pool of its own (``synthesis_workers``, cuzk's) runs at most that
many at once; the others wait for a worker in dispatch order, holding their bytes, and count as
synthesizing.

Each partition's synthesis work and GPU service time are drawn up front from the scenario's seed,
so every policy meets the same partitions (common random numbers). Nothing sleeps: an hour of
simulated time takes well under a second.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from pacer.control.policy import DispatchPolicy, Observation, budget_room
from pacer.sim.scenario import Scenario


class VirtualClock:
    """The simulation's clock: a callable returning simulated seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


PolicyFactory = Callable[[VirtualClock], DispatchPolicy]


class _Event(IntEnum):
    ARRIVAL = 0
    GPU_DONE = 1
    WAKE = 2
    PHASE = 3  # the CPU speed changes: synthesis progress rates change
    DEATH = 4  # a GPU worker dies
    SYNTHESIS_FAILURE = 5  # the oldest synthesis running fails


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


@dataclass
class RawRun:
    """What one simulation recorded; ``pacer.sim.report`` turns it into metrics."""

    scenario: Scenario
    policy: str
    end_s: float
    trace: Trace
    gaps: list[tuple[float, float]]  # (idle from, idle until) per GPU worker, between partitions
    first_arrival_s: float
    first_gpu_s: float | None
    completed: int
    peak_inflight: int
    peak_ready: int
    budget_violations: int  # partitions asked for that the memory budget refused
    bootstraps: int
    rebootstraps: int


class Simulation:
    """One run of one policy on one scenario: ``Simulation(scenario, "pi", factory).run()``."""

    def __init__(self, scenario: Scenario, policy_name: str, factory: PolicyFactory) -> None:
        self.scenario = scenario
        self.policy_name = policy_name
        self.clock = VirtualClock()
        self.policy = factory(self.clock)
        rng = np.random.default_rng(scenario.seed)
        total = scenario.total_partitions
        # Separate streams so that, e.g., the arrival count never shifts the service times.
        syn_rng, gpu_rng, arr_rng = rng.spawn(3)
        jobs = scenario.jobs
        scales = np.asarray(jobs.work_scales)
        work_scale = np.repeat(np.resize(scales, jobs.arrival.jobs), jobs.partitions_per_job)
        self._syn_work = scenario.synthesis.duration_s.sample(syn_rng, total) * work_scale
        self._gpu_base = scenario.gpu.service_s.sample(gpu_rng, total) * work_scale
        self._arrivals = self._arrival_times(arr_rng)
        stalls = sorted(scenario.gpu.stalls, key=lambda s: s.at_s)
        self._stalls = [(s.at_s, s.at_s + s.duration_s) for s in stalls]

    def _arrival_times(self, rng: np.random.Generator) -> list[float]:
        arrival = self.scenario.jobs.arrival
        if arrival.kind == "backlog":
            return [0.0] * arrival.jobs
        if arrival.kind == "bursts":
            return [(i // arrival.per_burst) * arrival.every_s for i in range(arrival.jobs)]
        gaps = rng.exponential(3600.0 / arrival.jobs_per_hour, arrival.jobs)
        return [float(t) for t in np.cumsum(gaps)]

    def _gpu_finish(self, start: float, work: float) -> float:
        """When GPU work of ``work`` seconds started at ``start`` ends, stalls included."""
        t, left = start, work
        for stall_from, stall_to in self._stalls:
            if stall_to <= t:
                continue
            if stall_from >= t + left:
                break
            if stall_from > t:
                left -= stall_from - t
            t = stall_to
        return t + left

    def run(self) -> RawRun:
        sc = self.scenario
        clock = self.clock
        workers = sc.gpu.workers
        events: list[tuple[float, int, int, int, int]] = []  # (t, seq, kind, a, b)
        seq = 0

        def push(t: float, kind: _Event, a: int = 0, b: int = 0) -> None:
            nonlocal seq
            seq += 1
            heapq.heappush(events, (t, seq, kind, a, b))

        next_pid = 0
        for t in self._arrivals:
            push(t, _Event.ARRIVAL)
        for phase in sc.synthesis.phases:
            push(phase.at_s, _Event.PHASE)
        for death in sc.gpu.deaths:
            push(death.at_s, _Event.DEATH, death.worker)
        for failure in sc.synthesis.failures:
            push(failure.at_s, _Event.SYNTHESIS_FAILURE)

        backlog: deque[int] = deque()
        ready: deque[int] = deque()
        idle_workers = list(range(workers - 1, -1, -1))
        last_end: list[float | None] = [None] * workers
        on_gpu: dict[int, tuple[int, float]] = {}  # worker → (partition, start)
        dead: set[int] = set()
        gaps: list[tuple[float, float]] = []
        # Processor sharing: V advances at the per-synthesis progress rate.
        work_done = 0.0
        # (V at finish, dispatch number, pid, start time)
        running: list[tuple[float, int, int, float]] = []
        started: deque[tuple[float, int]] = deque()  # (dispatch, dispatch number), in order
        finished: set[int] = set()  # dispatch numbers synthesized or failed, still in started
        dispatches = 0
        pool = self.policy.synthesis_workers
        # (pid, dispatch number) dispatched, waiting for one of the policy's workers
        queued: deque[tuple[int, int]] = deque()
        threads, cores = sc.synthesis.threads_per_synthesis, sc.synthesis.cores
        busy = inflight = completed = outstanding = 0
        peak_inflight = peak_ready = violations = 0
        first_gpu: float | None = None
        wake_gen = 0
        arrived_jobs = 0
        trace = Trace()
        service = np.zeros(sc.total_partitions)  # actual GPU time of each partition (s)

        def progress_rate() -> float:
            n = len(running)
            share = 1.0 if n == 0 else min(1.0, cores / (n * threads))
            return share / sc.synthesis.scale_at(clock.now)

        def synthesis_ages() -> tuple[float, ...]:
            """Ages of the oldest syntheses running, oldest first."""
            while started and started[0][1] in finished:
                finished.discard(started.popleft()[1])
            ages: list[float] = []
            for at, number in started:
                if len(ages) == Observation.SYNTHESIS_AGES:
                    break
                if number not in finished:
                    ages.append(clock.now - at)
            return tuple(ages)

        def record() -> None:
            trace.t.append(clock.now)
            trace.busy.append(busy)
            trace.available.append(1 if outstanding > 0 else 0)
            trace.ready.append(len(ready))
            trace.inflight.append(inflight)
            trace.synthesizing.append(len(running) + len(queued))
            trace.interval_s.append(self.policy.interval_s())
            trace.workers.append(workers - len(dead))

        record()
        end = sc.duration_s
        while True:
            rate = progress_rate()
            t_syn = clock.now + (running[0][0] - work_done) / rate if running else math.inf
            t_evt = events[0][0] if events else math.inf
            t = min(t_syn, t_evt)
            if t > end or math.isinf(t):
                break
            work_done += rate * (t - clock.now)
            clock.now = t

            if t_syn <= t_evt:
                while running and running[0][0] <= work_done + 1e-9:
                    _, number, pid, since = heapq.heappop(running)
                    finished.add(number)
                    ready.append(pid)
                    self.policy.observe_synthesis(t - since)
                while queued and pool is not None and len(running) < pool:
                    pid, number = queued.popleft()
                    heapq.heappush(
                        running, (work_done + float(self._syn_work[pid]), number, pid, t)
                    )
            else:
                _, _, kind, a, b = heapq.heappop(events)
                if kind == _Event.ARRIVAL:
                    for _ in range(sc.jobs.partitions_per_job):
                        backlog.append(next_pid)
                        next_pid += 1
                    outstanding += sc.jobs.partitions_per_job
                    arrived_jobs += 1
                elif kind == _Event.GPU_DONE:
                    worker, pid = a, b
                    if worker in dead:
                        continue  # its partition went back to the ready queue
                    del on_gpu[worker]
                    busy -= 1
                    inflight -= 1
                    outstanding -= 1
                    completed += 1
                    idle_workers.append(worker)
                    last_end[worker] = t
                    self.policy.observe_gpu_service(float(service[pid]))
                elif kind == _Event.DEATH:
                    dead.add(a)
                    if a in on_gpu:
                        pid, _ = on_gpu.pop(a)
                        busy -= 1
                        ready.appendleft(pid)
                    elif a in idle_workers:
                        idle_workers.remove(a)
                elif kind == _Event.SYNTHESIS_FAILURE and running:
                    victim = min(range(len(running)), key=lambda i: running[i][3])
                    _, number, pid, since = running.pop(victim)
                    heapq.heapify(running)
                    finished.add(number)
                    inflight -= 1
                    backlog.appendleft(pid)
                    self.policy.observe_synthesis_failure(t - since)
                elif kind == _Event.WAKE and a != wake_gen:
                    continue  # superseded by a later decision

            while idle_workers and ready:
                worker = idle_workers.pop()
                pid = ready.popleft()
                busy += 1
                if first_gpu is None:
                    first_gpu = t
                prev = last_end[worker]
                if prev is not None:
                    gaps.append((prev, t))
                work = self._gpu_base[pid] * sc.gpu.scale_at(t)
                done = self._gpu_finish(t, float(work))
                service[pid] = done - t
                on_gpu[worker] = (pid, t)
                push(done, _Event.GPU_DONE, worker, pid)
            peak_ready = max(peak_ready, len(ready))

            free_bytes = sc.memory.budget_bytes - inflight * sc.partition.bytes
            fits = budget_room(free_bytes, sc.partition.bytes, holding=inflight > 0)
            obs = Observation(
                ready=len(ready),
                synthesizing=len(running) + len(queued),
                gpu_busy=busy,
                gpu_workers=workers - len(dead),
                backlog=len(backlog),
                budget_free=fits if backlog else None,
                synthesis_ages_s=synthesis_ages(),
                gpu_busy_ages_s=tuple(t - since for _, since in on_gpu.values()),
            )
            decision = self.policy.decide(obs)
            asked = min(decision.dispatch, len(backlog))
            violations += max(0, asked - fits)  # refused, as the pipeline refuses them
            for _ in range(min(asked, fits)):
                pid = backlog.popleft()
                dispatches += 1
                started.append((t, dispatches))
                if pool is not None and len(running) >= pool:
                    queued.append((pid, dispatches))
                else:
                    heapq.heappush(
                        running, (work_done + float(self._syn_work[pid]), dispatches, pid, t)
                    )
                inflight += 1
            peak_inflight = max(peak_inflight, inflight)
            if decision.next_at is not None:
                wake_gen += 1
                push(max(decision.next_at, t + 1e-6), _Event.WAKE, wake_gen)
            record()
            if arrived_jobs == len(self._arrivals) and outstanding == 0:
                break

        if outstanding > 0:
            clock.now = end
        record()
        return RawRun(
            scenario=sc,
            policy=self.policy_name,
            end_s=clock.now,
            trace=trace,
            gaps=gaps,
            first_arrival_s=self._arrivals[0],
            first_gpu_s=first_gpu,
            completed=completed,
            peak_inflight=peak_inflight,
            peak_ready=peak_ready,
            budget_violations=violations,
            bootstraps=self.policy.bootstraps,
            rebootstraps=self.policy.rebootstraps,
        )
