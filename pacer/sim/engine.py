"""Discrete-event simulation of the pipeline on a virtual clock.

Model: jobs of N partitions arrive (all at once, or Poisson); the policy decides when each
partition is dispatched to synthesis; syntheses share the CPU (processor sharing: with n running,
each progresses at min(1, cores ÷ (n × threads)), so a synthesis takes its sampled duration ×
max(1, n × threads ÷ cores)); synthesized partitions wait in the ready queue; W GPU workers take
them in order. A partition holds its bytes from dispatch until its GPU work ends; as in the
pipeline, a dispatch the memory budget cannot hold is refused (the policy sees the room it has
left, ``Observation.budget_free``, and what it asks beyond counts as a budget violation). A
policy with a synthesis worker pool of its own (``synthesis_workers``, cuzk's), or a scenario
with an executor (``synthesis.executor``: the service's synthesis processes), runs at most that
many at once; the others wait for a worker in dispatch order, holding their bytes, and count as
synthesizing. An executor's dispatches reach its processes ``handoff_s`` after they are made.
A partition whose proof is checked on the CPU (a replay's ``verify_s``) holds its bytes until
one of the executor's verify threads has checked it; it counts as done then.

Each partition's synthesis work and GPU service time are drawn up front from the scenario's seed,
so every policy meets the same partitions (common random numbers); a `Replay` gives them instead,
with each job's arrival and size, to run recorded partitions (`pacer tune`). Nothing sleeps: an
hour of simulated time takes well under a second.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

from pacer.control.policy import DispatchPolicy, Observation, budget_room
from pacer.sim.disturbances import stalled_finish
from pacer.sim.partitions import Replay as Replay  # where the replay's users find it
from pacer.sim.partitions import partitions
from pacer.sim.scenario import Scenario
from pacer.sim.state import Event, EventKind, EventQueue, RunState, Trace


class VirtualClock:
    """The simulation's clock: a callable returning simulated seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


PolicyFactory = Callable[[VirtualClock], DispatchPolicy]


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

    def __init__(
        self, scenario: Scenario, policy_name: str, factory: PolicyFactory,
        replay: Replay | None = None,
    ) -> None:  # fmt: skip
        self.scenario = scenario
        self.policy_name = policy_name
        self.clock = VirtualClock()
        self.policy = factory(self.clock)
        drawn = partitions(scenario, replay)
        self._syn_work, self._gpu_base, self._verify_s = (
            drawn.synthesis_work, drawn.gpu_base, drawn.verify_s)  # fmt: skip
        self._arrivals, self._job_sizes = drawn.arrivals_s, drawn.job_sizes
        stalls = sorted(scenario.gpu.stalls, key=lambda s: s.at_s)
        self._stalls = [(s.at_s, s.at_s + s.duration_s) for s in stalls]
        # Syntheses run at once: by the policy's own workers, the executor's processes.
        executor = scenario.synthesis.executor
        pools = [self.policy.synthesis_workers, None if executor is None else executor.processes]
        self._pool = min((n for n in pools if n is not None), default=None)
        self._handoff_s = 0.0 if executor is None else executor.handoff_s
        self._verify_threads = 1 if executor is None else executor.verify_threads
        self._parts = executor is not None  # the policy hears how each synthesis's time divides
        self._hangs = [(h.at_s, h.fails_after_s) for h in scenario.synthesis.hangs]
        self._state = RunState(scenario.gpu.workers, drawn.total)
        self._state.checks_take_workers = self._verify_threads == 0 and self._pool is not None
        self._events = EventQueue()
        self._handlers: dict[EventKind, Callable[[Event], bool]] = {
            EventKind.ARRIVAL: self._on_arrival,
            EventKind.GPU_DONE: self._on_gpu_done,
            EventKind.WAKE: self._on_wake,
            EventKind.PHASE: self._on_phase,
            EventKind.DEATH: self._on_death,
            EventKind.SYNTHESIS_FAILURE: self._on_synthesis_failure,
            EventKind.HANG_FAILURE: self._on_hang_failure,
            EventKind.OUTAGE: self._on_outage,
            EventKind.RETURN: self._on_return,
            EventKind.HANDOFF: self._on_handoff,
            EventKind.VERIFIED: self._on_verified,
        }

    def run(self) -> RawRun:
        """Run until every job is done or the scenario's ``duration_s`` ends; return what was
        recorded. A Simulation runs once."""
        s, clock = self._state, self.clock
        self._schedule()
        self._record()
        end = self.scenario.duration_s
        while True:
            rate = self._progress_rate()
            t_syn = clock.now + (s.running[0][0] - s.work_done) / rate if s.running else math.inf
            t_evt = self._events.next_t()
            t = min(t_syn, t_evt)
            if t > end or math.isinf(t):
                break
            s.work_done += rate * (t - clock.now)
            clock.now = t
            if t_syn <= t_evt:
                self._on_syntheses_done()
            else:
                event = self._events.pop()
                if not self._handlers[event.kind](event):
                    continue  # nothing changed: the policy is not asked
            self._start_gpu_work()
            self._decide()
            self._record()
            if s.arrived_jobs == len(self._arrivals) and s.outstanding == 0:
                break
        if s.outstanding > 0:
            clock.now = end
        self._record()
        return self._result()

    def _schedule(self) -> None:
        """Push the scenario's events: arrivals, CPU phases, worker deaths and outages,
        synthesis failures."""
        sc, push = self.scenario, self._events.push
        for job, t in enumerate(self._arrivals):
            push(t, EventKind.ARRIVAL, job)
        for phase in sc.synthesis.phases:
            push(phase.at_s, EventKind.PHASE)
        for death in sc.gpu.deaths:
            push(death.at_s, EventKind.DEATH, death.worker)
        for outage in sc.gpu.outages:
            for worker in outage.workers:
                push(outage.at_s, EventKind.OUTAGE, worker)
                push(outage.at_s + outage.duration_s, EventKind.RETURN, worker)
        for failure in sc.synthesis.failures:
            push(failure.at_s, EventKind.SYNTHESIS_FAILURE)

    def _progress_rate(self) -> float:
        """Work each running synthesis does per simulated second: its share of the cores, over
        the CPU phase's scale."""
        syn = self.scenario.synthesis
        n = len(self._state.running)
        share = 1.0 if n == 0 else min(1.0, syn.cores / (n * syn.threads_per_synthesis))
        return share / syn.scale_at(self.clock.now)

    # -- what happens at each event: True when the policy is to be asked after it ---------------

    def _on_syntheses_done(self) -> None:
        """Syntheses whose work is done join the ready queue; waiting ones take their workers."""
        s, now = self._state, self.clock.now
        while s.running and s.running[0][0] <= s.work_done + 1e-9:
            _, number, pid, began = heapq.heappop(s.running)
            s.ready.append(pid)
            seconds, parts = s.ended(number, began, now)  # from its dispatch
            self.policy.observe_synthesis(seconds, parts if self._parts else None)
        self._take_free_workers()

    def _on_arrival(self, event: Event) -> bool:
        s = self._state
        per_job = self._job_sizes[event.arg]
        s.backlog.extend(range(s.next_pid, s.next_pid + per_job))
        s.next_pid += per_job
        s.outstanding += per_job
        s.arrived_jobs += 1
        return True

    def _on_gpu_done(self, event: Event) -> bool:
        s, worker = self._state, event.arg
        held = s.on_gpu.get(worker)
        if held is None or held[2] != event.t:
            return False  # the worker left: its partition went back to the ready queue
        del s.on_gpu[worker]
        s.gpu_ended(held[1])
        s.busy -= 1
        s.idle_workers.append(worker)
        s.last_end[worker] = event.t
        self.policy.observe_gpu_service(float(s.service[event.pid]))
        if self._verify_s[event.pid] > 0:
            s.to_verify.append((event.pid, event.t))
            self._take_free_workers()
        else:
            s.done()
        return True

    def _on_verified(self, event: Event) -> bool:
        self._state.verifying -= 1
        self._take_free_workers()
        self._state.done()
        return True

    def _take_free_workers(self) -> None:
        """Free synthesis workers take what waits for one, in the order it was handed to them:
        syntheses, and checks where they take turns on the workers; free verify threads take
        the checks, in the order the GPU work ended."""
        s, pool = self._state, self._pool
        while pool is not None and s.on_workers < pool:
            if s.checks_take_workers and s.check_is_next():
                self._check()
            elif s.queued:
                self._start_synthesis(*s.queued.popleft())
            else:
                break
        while not s.checks_take_workers and s.to_verify and s.verifying < self._verify_threads:
            self._check()

    def _check(self) -> None:
        s = self._state
        (pid, _), s.verifying = s.to_verify.popleft(), s.verifying + 1
        check_s = float(self._verify_s[pid])
        self._events.push(self.clock.now + check_s, EventKind.VERIFIED, 0, pid)

    def _on_wake(self, event: Event) -> bool:
        return event.arg == self._state.wake_gen  # False: a later decision superseded it

    def _on_phase(self, event: Event) -> bool:
        return True  # the progress rate reads the CPU's scale at every step

    def _on_death(self, event: Event) -> bool:
        s, worker = self._state, event.arg
        s.dead.add(worker)
        if worker in s.on_gpu:
            pid, since, _ = s.on_gpu.pop(worker)
            s.gpu_ended(since)
            s.busy -= 1
            s.ready.appendleft(pid)
        elif worker in s.idle_workers:
            s.idle_workers.remove(worker)
        return True

    def _on_outage(self, event: Event) -> bool:
        return self._on_death(event)  # a death it returns from

    def _on_return(self, event: Event) -> bool:
        s, worker = self._state, event.arg
        s.dead.discard(worker)
        s.idle_workers.append(worker)
        s.last_end[worker] = None  # its absence is no idle gap
        return True

    def _on_handoff(self, event: Event) -> bool:
        self._state.handing_off -= 1
        self._to_processes(event.pid, event.arg)
        return False  # nothing the policy sees changed: still synthesizing

    def _on_hang_failure(self, event: Event) -> bool:
        s = self._state
        pid, since = s.hung.pop(event.arg)
        s.forget(event.arg)
        s.inflight -= 1
        s.backlog.appendleft(pid)
        self.policy.observe_synthesis_failure(event.t - since)
        return True

    def _on_synthesis_failure(self, event: Event) -> bool:
        s = self._state
        if s.running:
            victim = min(range(len(s.running)), key=lambda i: s.running[i][3])
            _, number, pid, since = s.running.pop(victim)
            heapq.heapify(s.running)
            s.forget(number)
            s.inflight -= 1
            s.backlog.appendleft(pid)
            self.policy.observe_synthesis_failure(event.t - since)
        return True

    # -- after each event -------------------------------------------------------------------------

    def _start_gpu_work(self) -> None:
        """Idle GPU workers take ready partitions, in order."""
        s, t = self._state, self.clock.now
        while s.idle_workers and s.ready:
            worker = s.idle_workers.pop()
            pid = s.ready.popleft()
            s.busy += 1
            if s.first_gpu is None:
                s.first_gpu = t
            prev = s.last_end[worker]
            if prev is not None:
                s.gaps.append((prev, t))
            work = self._gpu_base[pid] * self.scenario.gpu.scale_at(t)
            done = stalled_finish(self._stalls, t, float(work))
            s.service[pid] = done - t
            s.on_gpu[worker] = (pid, t, done)
            s.gpu_started(t)
            self._events.push(done, EventKind.GPU_DONE, worker, pid)
        s.peak_ready = max(s.peak_ready, len(s.ready))

    def _decide(self) -> None:
        """Ask the policy; start what it asks and the memory budget admits; note its wake."""
        s, sc, t = self._state, self.scenario, self.clock.now
        free_bytes = sc.memory.budget_bytes - s.inflight * sc.partition.bytes
        fits = budget_room(free_bytes, sc.partition.bytes, holding=s.inflight > 0)
        decision = self.policy.decide(self._observation(fits))
        asked = min(decision.dispatch, len(s.backlog))
        s.violations += max(0, asked - fits)  # refused, as the pipeline refuses them
        for _ in range(min(asked, fits)):
            self._dispatch(s.backlog.popleft())
        s.peak_inflight = max(s.peak_inflight, s.inflight)
        if decision.next_at is not None:
            s.wake_gen += 1
            self._events.push(max(decision.next_at, t + 1e-6), EventKind.WAKE, s.wake_gen)

    def _observation(self, budget_free: int) -> Observation:
        s, now = self._state, self.clock.now
        return Observation(
            ready=len(s.ready),
            synthesizing=s.synthesizing,
            gpu_busy=s.busy,
            gpu_workers=s.live_workers,
            backlog=len(s.backlog),
            budget_free=budget_free if s.backlog else None,
            synthesis_ages_s=s.synthesis_ages(now),
            gpu_busy_ages_s=s.gpu_busy_ages(now),
        )

    def _dispatch(self, pid: int) -> None:
        """Start the synthesis of ``pid``, or queue it for a worker; through the hand-off first,
        where the executor has one."""
        s, now = self._state, self.clock.now
        s.dispatches += 1
        s.started[s.dispatches] = now
        s.inflight += 1
        if self._handoff_s > 0:
            s.handing_off += 1
            self._events.push(now + self._handoff_s, EventKind.HANDOFF, s.dispatches, pid)
        else:
            self._to_processes(pid, s.dispatches)

    def _to_processes(self, pid: int, number: int) -> None:
        """Synthesis ``number`` of ``pid`` starts, or waits for a worker of the pool."""
        s = self._state
        if self._pool is not None and s.on_workers >= self._pool:
            s.queued.append((pid, number))
            s.waited.add(number)
        else:
            self._start_synthesis(pid, number)

    def _start_synthesis(self, pid: int, number: int) -> None:
        """Start synthesis ``number`` of ``pid``; the first to start after a hang's time hangs."""
        s, now = self._state, self.clock.now
        if self._hangs and self._hangs[0][0] <= now:
            _, fails_after_s = self._hangs.pop(0)
            s.hung[number] = (pid, now)
            if fails_after_s is not None:
                self._events.push(now + fails_after_s, EventKind.HANG_FAILURE, number)
            return
        s.start_synthesis(pid, number, float(self._syn_work[pid]), now)

    def _record(self) -> None:
        self._state.record(self.clock.now, self.policy.interval_s())

    def _result(self) -> RawRun:
        s = self._state
        return RawRun(
            scenario=self.scenario,
            policy=self.policy_name,
            end_s=self.clock.now,
            trace=s.trace,
            gaps=s.gaps,
            first_arrival_s=self._arrivals[0],
            first_gpu_s=s.first_gpu,
            completed=s.completed,
            peak_inflight=s.peak_inflight,
            peak_ready=s.peak_ready,
            budget_violations=s.violations,
            bootstraps=self.policy.bootstraps,
            rebootstraps=self.policy.rebootstraps,
        )
