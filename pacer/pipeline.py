"""The asyncio pipeline: backlog → paced dispatch → synthesis → ready queue → proving workers.

The dispatch loop asks the controller (the same object the simulator drives) how many
partitions to start and when to ask again, and wakes early on every pipeline event. Synthesis
runs on a thread pool sized to the synthesis-concurrency cap: NumPy and native provers release
the GIL, and the buffers stay in this process, ready for the proving worker (and the pinned
pool) without a copy. Each proving worker has its own thread. Every partition holds its bytes
against the memory budget from dispatch until its proving (GPU copy included) has finished.

Busy time and idle gaps are kept per GPU, not per worker: with two workers on one device the
GPU is busy while either proves, and an idle gap is a stretch when neither does (from one
partition's end to the next one's start on that device).

Every workload call has a time limit (`pacer.attempts.CallLimits`). A watchdog on the loop
abandons a call past it: the partition's attempt fails with the reason, a new thread takes the
hung one's place (synthesis and verification run on a `DaemonPool`; a proving worker gets a new
thread under the same index), and the partition's bytes stay counted against the budget until
the call really returns. Whatever a call raises, BaseException included, and a proof unfit to
journal fail the attempt, not the thread. The service decides whether the attempt is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from pacer.attempts import CALLS, Call, CallLimits, CallTimedOut, proof_problem, seconds_text
from pacer.backlog import Backlog
from pacer.config import TimeoutSettings
from pacer.policy import Caps, DispatchPolicy, Observation
from pacer.supervision import Supervisor
from pacer.threads import CallState, DaemonPool
from pacer.workload import PartitionSpec, Proof, Workload

log = logging.getLogger("pacer.pipeline")
MIN_WAIT_S = 0.001
WATCH_MIN_S = 0.01  # the watchdog checks call limits at 1/20 of the shortest, within these
WATCH_MAX_S = 1.0


@dataclass
class Work:
    """One partition on its way through the pipeline."""

    spec: PartitionSpec
    nbytes: int
    dispatched_at: float = 0.0
    synthesis_s: float = 0.0
    buffers: Any = None
    verify: bool = False  # chosen at dispatch, so proving can keep what verification reads


@dataclass(frozen=True)
class Outcome:
    """A partition's attempt that left the pipeline: proved (``proof``) or failed (``error``,
    the reason, and ``call``, the one that failed: synthesis, prove or verify)."""

    job_id: str
    index: int
    gpu: int | None  # the device it was proved on (the worker, when proving on the CPU)
    synthesis_s: float
    gpu_s: float
    proof: Proof | None = None
    error: str | None = None
    call: Call | None = None


class Observer(Protocol):
    """What the pipeline reports as it happens (metrics implement it)."""

    def synthesized(self, seconds: float) -> None: ...

    def proved(self, gpu: int, gpu_s: float, phases_s: dict[str, float]) -> None: ...

    def idle_gap(self, gpu: int, seconds: float) -> None: ...

    def finished(self, outcome: Outcome) -> None: ...

    def hung_call(self, call: Call) -> None:
        """A ``call`` ran past its limit and was abandoned."""
        ...


class BusyMeter:
    """Busy time (a GPU's, in the pipeline): in total, and as a fraction of the trailing
    ``window_s``.

    Busy intervals are added when they end, into per-second buckets (constant work and memory
    per partition); an interval still running is passed in by the reader.
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
class _Gpu:
    """A device's busy time, shared by its workers' threads (under ``lock``)."""

    label: int
    meter: BusyMeter
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    active: int = 0  # workers proving on it now
    busy_since: float | None = None  # when ``active`` last rose from 0
    last_end: float | None = None  # when it last fell to 0

    def begin(self, now: float) -> float | None:
        """A worker starts a partition; returns the idle gap that this ends, if any."""
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


@dataclass(eq=False)
class _Running:
    """A workload call under way, watched against its limit."""

    call: Call
    work: Work
    started: float
    future: Future[Any] | None = None  # on the pool (synthesis, verify); None for prove
    outcome: Outcome | None = None  # verify: what proving produced
    state: CallState = field(default_factory=CallState)


@dataclass
class _Worker:
    """A proving worker. ``takes``, ``busy_since`` and ``running`` are written by its thread,
    and by the loop when it abandons the thread's call (the thread writes none of them after)."""

    index: int
    gpu: _Gpu
    thread: threading.Thread | None = field(default=None, repr=False)
    takes: int = 0
    busy_since: float | None = None
    running: _Running | None = None


def _threadsafe(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
    """Call back on the loop from a thread; nothing when the loop is closed (the process is on
    its way out and a late call's result has nowhere to go)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


class Pipeline:
    """Runs partitions of accepted jobs through synthesis and proving, paced by ``controller``.

    ``on_outcome`` is called on the event loop for every partition that leaves the pipeline.
    ``on_task_failure(name, exc)``, when set, is called on the loop when a thread's call hangs
    (``exc`` is a `CallTimedOut`) or raises what would have ended the thread (a BaseException
    that is no Exception), or a proving worker's thread dies; names are ``prove-3``,
    ``synthesis``, ``verify`` and ``pipeline-watchdog``.
    """

    def __init__(
        self,
        controller: DispatchPolicy,
        workload: Workload,
        caps: Caps,
        *,
        workers: int,
        budget_bytes: int,
        on_outcome: Callable[[Outcome], None],
        observer: Observer | None = None,
        verify_every: int = 0,
        limits: CallLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.controller = controller
        self.workload = workload
        self.caps = caps
        self.budget_bytes = budget_bytes
        self._on_outcome = on_outcome
        self.observer = observer
        self.on_task_failure: Callable[[str, BaseException], None] | None = None
        self.limits = limits or CallLimits(TimeoutSettings())
        self._release_buffers = getattr(workload, "release", None)
        self._verify_every = verify_every
        self._clock = clock
        # A heap of jobs, each with its pending partitions as runs: a job of a million
        # partitions costs one heap entry and one run.
        self._backlog = Backlog()
        # Thread-safe: each proving worker is a thread that takes the next ready partition
        # itself, so a partition costs the event loop two callbacks, not a task and a future.
        self._ready: queue.SimpleQueue[Work | None] = queue.SimpleQueue()
        self._ready_puts = 0
        # Daemon threads nothing joins: a hung synthesis or verification must not keep the
        # process alive at exit, and the pool replaces a thread stuck in an abandoned call.
        self._synth_pool = DaemonPool(caps.synthesis_concurrency, "pacer-synth")
        self._running: set[_Running] = set()  # synthesis and verification calls under way
        # A GPU workload says which device each worker proves on; otherwise each worker is
        # its own "GPU" (the label of its metrics).
        device_of: Callable[[int], int] = getattr(workload, "device_of", lambda worker: worker)
        self._gpus: dict[int, _Gpu] = {}
        for worker in range(workers):
            label = device_of(worker)
            self._gpus.setdefault(label, _Gpu(label, BusyMeter(clock)))
        self._workers = [_Worker(i, self._gpus[device_of(i)]) for i in range(workers)]
        self._prove_keeps = "keep_output" in inspect.signature(workload.prove).parameters
        self._dispatched = 0
        self._wake = asyncio.Event()
        self._dispatching = False
        self._closing = False
        self._held = False
        self._cancelled: set[str] = set()
        self.synthesizing = 0
        self._synthesis_started: dict[int, float] = {}  # id(work) → dispatch time, in order
        self.verifying = 0
        self.inflight_bytes = 0  # abandoned calls' partitions included: they hold memory yet
        self.inflight = 0  # partitions holding memory, but for those of abandoned calls
        self.abandoned = 0  # partitions held by abandoned calls that have not returned
        self.abandoned_bytes = 0
        self.hung_calls: dict[Call, int] = dict.fromkeys(CALLS, 0)
        self._abandoned_provers: set[threading.Thread] = set()
        self.proved = 0
        self._dispatcher: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None

    # -- state ----------------------------------------------------------------------------

    @property
    def backlog(self) -> int:
        return len(self._backlog)

    @property
    def ready(self) -> int:
        return self._ready_puts - sum(w.takes for w in self._workers)

    @property
    def gpu_busy(self) -> int:
        return sum(w.busy_since is not None for w in self._workers)

    @property
    def workers(self) -> int:
        return len(self._workers)

    @property
    def abandoned_threads(self) -> int:
        """Threads still running a call that was abandoned (synthesis, prove or verify)."""
        self._abandoned_provers = {t for t in self._abandoned_provers if t.is_alive()}
        return self._synth_pool.abandoned + len(self._abandoned_provers)

    @property
    def pool(self) -> Any:
        """The workload's pinned pool, once it has one."""
        return getattr(self.workload, "pool", None)

    @property
    def synthesis_restarts(self) -> int:
        """Times the workload replaced its synthesis processes after one died (0 without)."""
        return int(getattr(self.workload, "synthesis_restarts", 0))

    @property
    def gpus(self) -> list[int]:
        """The label of every GPU proving (device index; worker index when on the CPU)."""
        return list(self._gpus)

    def workers_on(self, gpu: int) -> int:
        return sum(w.gpu.label == gpu for w in self._workers)

    def busy_ratio(self, gpu: int) -> float:
        """Fraction of the trailing minute GPU ``gpu`` had a partition on it."""
        return self._gpus[gpu].ratio()

    def busy_seconds(self, gpu: int) -> float:
        return self._gpus[gpu].busy_seconds()

    @property
    def live_workers(self) -> int:
        """Proving workers whose thread runs (or has yet to start): a dead one proves nothing."""
        return sum(w.thread is None or w.thread.is_alive() for w in self._workers)

    def observation(self) -> Observation:
        now = self._clock()
        # The oldest syntheses running are the first in the insertion-ordered dict.
        oldest = itertools.islice(self._synthesis_started.values(), Observation.SYNTHESIS_AGES)
        ages = []
        for worker in self._workers:
            since = worker.busy_since  # written by the worker's thread: read once
            if since is not None:
                ages.append(max(0.0, now - since))
        return Observation(
            ready=self.ready,
            synthesizing=self.synthesizing,
            gpu_busy=self.gpu_busy,
            gpu_workers=self.live_workers,
            backlog=0 if self._held else self.backlog,
            pool_free=None if self.pool is None else int(self.pool.slots_free),
            synthesis_ages_s=tuple(max(0.0, now - at) for at in oldest),
            gpu_busy_ages_s=tuple(ages),
        )

    @property
    def idle(self) -> bool:
        """Nothing in flight: no synthesis, nothing ready, no worker proving or verifying."""
        return self.inflight == 0 and self.verifying == 0

    # -- jobs -----------------------------------------------------------------------------

    def enqueue(
        self, job_id: str, seed: int, params: dict[str, Any], indices: Iterable[int],
        *, priority: int = 0, order: int = 0,
    ) -> None:  # fmt: skip
        """Add partitions of a job to the backlog: higher ``priority`` first, then lower
        ``order`` (the job's arrival), then lower partition index. ``indices``: a ``range``
        or an `IndexRanges` stays a few runs however many partitions it holds."""
        self._cancelled.discard(job_id)
        self._backlog.add(job_id, seed, params, indices, priority=priority, order=order)
        self._wake.set()

    def cancel(self, job_id: str) -> int:
        """Drop a job's partitions from the backlog (in-flight ones finish, unreported).
        Returns how many were dropped."""
        self._cancelled.add(job_id)
        dropped = self._backlog.cancel(job_id)
        self._wake.set()
        return dropped

    # -- running --------------------------------------------------------------------------

    def start(self, supervisor: Supervisor | None = None) -> None:
        """Start the dispatch loop, the watchdog and the proving workers on the running loop;
        the dispatch loop and the watchdog run as the tasks ``dispatch`` and ``call-watchdog``
        of ``supervisor`` (restarted if they fail), if any."""
        self._dispatching = True
        if supervisor is None:
            self._dispatcher = asyncio.create_task(self._dispatch_loop(), name="pacer-dispatch")
            self._watchdog = asyncio.create_task(self._watch_loop(), name="pacer-watchdog")
        else:
            self._dispatcher = supervisor.start("dispatch", self._dispatch_loop)
            self._watchdog = supervisor.start("call-watchdog", self._watch_loop)
        for worker in self._workers:
            self._start_worker(worker)

    def _start_worker(self, worker: _Worker) -> None:
        loop = asyncio.get_running_loop()
        worker.thread = threading.Thread(
            target=self._prove_loop, args=(worker, loop), name=f"pacer-prove-{worker.index}",
            daemon=True,
        )  # fmt: skip
        worker.thread.start()

    def hold(self, held: bool) -> None:
        """Dispatch nothing new while ``held`` (in-flight work goes on); False resumes. Held,
        the policy sees no backlog, so it neither dispatches nor winds its integral up."""
        self._held = held
        self._wake.set()

    def stop_dispatching(self) -> None:
        self._dispatching = False
        self._wake.set()

    async def drain(self, timeout_s: float) -> bool:
        """Stop dispatching and wait up to ``timeout_s`` for in-flight partitions to finish.
        True if everything finished."""
        self.stop_dispatching()
        deadline = self._clock() + timeout_s
        while not self.idle:
            left = deadline - self._clock()
            if left <= 0:
                return False
            self._wake.clear()
            try:
                async with asyncio.timeout(min(left, 0.5)):
                    await self._wake.wait()
            except TimeoutError:
                pass
        return True

    async def close(self) -> None:
        """Stop the workers and release the threads (running calls are not interrupted, and
        not waited for: every thread is a daemon)."""
        self._closing = True
        self.stop_dispatching()
        if self._dispatcher is not None:
            await self._dispatcher
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        for _ in self._workers:
            self._ready.put(None)
        self._synth_pool.shutdown()

    async def _dispatch_loop(self) -> None:
        while self._dispatching:
            decision = self.controller.decide(self.observation())
            for _ in range(decision.dispatch):
                if not self._dispatch_one():
                    break
            self._wake.clear()
            timeout = None
            if decision.next_at is not None:
                # Timers are good to about a millisecond; the controller catches up on what
                # fell due meanwhile, so waking more often would only spin.
                timeout = max(decision.next_at - self._clock(), MIN_WAIT_S)
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def _dispatch_one(self) -> bool:
        queued = None if self._held else self._backlog.peek()
        if queued is None:
            return False
        nbytes = self.workload.partition_bytes(queued.params)
        holding = self.inflight > 0 or self.abandoned > 0
        if self.inflight_bytes + nbytes > self.budget_bytes and holding:
            return False  # exact byte budget: wait for memory to come back
        spec = self._backlog.pop()
        assert spec is not None
        work = Work(spec, nbytes, dispatched_at=self._clock())
        self._dispatched += 1
        work.verify = bool(self._verify_every) and self._dispatched % self._verify_every == 0
        self.inflight += 1
        self.inflight_bytes += nbytes
        self.synthesizing += 1
        self._synthesis_started[id(work)] = work.dispatched_at
        self._start_synthesis(work)
        return True

    # -- synthesis ------------------------------------------------------------------------

    def _start_synthesis(self, work: Work) -> None:
        # A bare future and a callback rather than a task per partition: cheaper on the loop.
        loop = asyncio.get_running_loop()
        future = self._synth_pool.submit(self.workload.synthesize, work.spec)
        running = _Running("synthesis", work, work.dispatched_at, future)
        self._running.add(running)
        future.add_done_callback(lambda _: _threadsafe(loop, self._synthesized, running))

    def _synthesized(self, running: _Running) -> None:
        self._running.discard(running)
        work, done = running.work, running.future
        self._synthesis_started.pop(id(work), None)
        assert done is not None
        running.future = None  # the future's callback holds ``running``: no cycle for the GC
        exc = None if done.cancelled() else done.exception()
        if not running.state.finish():  # abandoned: the attempt failed already
            self._abandoned_returned(running, None if exc or done.cancelled() else done.result())
            return
        self.synthesizing -= 1
        if done.cancelled():  # the pool shut down before it started: pending in the journal
            self._release(work)
            return
        if exc is not None:
            self.controller.observe_synthesis_failure(self._clock() - work.dispatched_at)
            log.error("synthesis failed: %r", exc, exc_info=exc, extra=self._context(work))
            self._release(work)
            if not isinstance(exc, Exception):
                self._task_failed("synthesis", exc)
            self._report(Outcome(work.spec.job_id, work.spec.index, None, 0.0, 0.0,
                                 error=f"synthesis failed: {exc!r}", call="synthesis"))  # fmt: skip
            return
        work.buffers = done.result()
        work.synthesis_s = self._clock() - work.dispatched_at
        self.controller.observe_synthesis(work.synthesis_s)
        if self.observer is not None:
            self.observer.synthesized(work.synthesis_s)
        self._ready_puts += 1
        self._ready.put(work)
        self._wake.set()

    # -- proving ----------------------------------------------------------------------------

    def _prove_loop(self, worker: _Worker, loop: asyncio.AbstractEventLoop) -> None:
        """A proving worker's thread. Whatever prove does is caught in `_prove_one`; should
        pacer's own code here fail, the loop hears of it and starts another thread."""
        try:
            self._prove_until_closed(worker, loop)
        except BaseException as exc:
            _threadsafe(loop, self._worker_died, worker, threading.current_thread(), exc)

    def _prove_until_closed(self, worker: _Worker, loop: asyncio.AbstractEventLoop) -> None:
        """Take the next ready partition, prove it, report; until told to stop (None).

        The thread marks itself busy in its worker's fields (read by the loop for
        observations), so a partition costs the loop one callback. If the watchdog abandoned
        the call meanwhile, another thread has this worker's place: this one hands the
        partition's memory back and ends.
        """
        while True:
            work = self._ready.get()
            if work is None:
                return
            start = self._clock()
            running = _Running("prove", work, start)
            worker.running = running
            worker.busy_since = start
            worker.takes += 1
            gap = worker.gpu.begin(start)
            proof, error, raised = self._prove_one(worker, work)
            end = self._clock()
            if not running.state.finish():
                _threadsafe(loop, self._abandoned_returned, running, None)
                return
            worker.running = None
            worker.gpu.end(end)
            _threadsafe(loop, self._proved, worker, work, start, end, gap, proof, error, raised)
            worker.busy_since = None

    def _prove_one(
        self, worker: _Worker, work: Work
    ) -> tuple[Proof | None, str | None, BaseException | None]:
        """(proof, None, None), or (None, the reason, what prove raised if it did)."""
        context = self._context(work, worker.gpu.label)
        try:
            if self._prove_keeps:
                prove: Any = self.workload.prove  # takes the optional keep_output
                proof = prove(work.buffers, worker.index, keep_output=work.verify)
            else:
                proof = self.workload.prove(work.buffers, worker.index)
        except BaseException as exc:
            log.error("proving failed: %r", exc, exc_info=exc, extra=context)
            return None, f"proving failed: {exc!r}", exc
        problem = proof_problem(proof)
        if problem is not None:
            log.error("proving failed: %s", problem, extra=context)
            return None, problem, None
        return proof, None, None

    def _proved(
        self, worker: _Worker, work: Work, start: float, end: float, gap: float | None,
        proof: Proof | None, error: str | None, raised: BaseException | None,
    ) -> None:  # fmt: skip
        if gap is not None and self.observer is not None:
            self.observer.idle_gap(worker.gpu.label, gap)
        spec = work.spec
        outcome = Outcome(spec.job_id, spec.index, worker.gpu.label, work.synthesis_s, end - start,
                          proof, error, None if proof is not None else "prove")  # fmt: skip
        if raised is not None and not isinstance(raised, Exception):
            self._task_failed(f"prove-{worker.index}", raised)  # it would have ended the thread
        if proof is not None:
            self.proved += 1
            self.controller.observe_gpu_service(end - start)
            if self.observer is not None:
                self.observer.proved(worker.gpu.label, end - start, proof.phases_s)
            if work.verify:
                self._start_verify(work, outcome)
                return
        self._release(work)
        self._report(outcome)

    def _worker_died(self, worker: _Worker, thread: threading.Thread, exc: BaseException) -> None:
        """A proving worker's thread ended on an error of pacer's own: fail the partition it
        held, if any, and start another thread in its place (unless closing)."""
        log.error("proving worker %d died: %r", worker.index, exc, exc_info=exc,
                  extra={"gpu": worker.gpu.label})  # fmt: skip
        self._task_failed(f"prove-{worker.index}", exc)
        if worker.thread is not thread:
            return
        running = worker.running
        if running is not None and running.state.abandon():
            worker.running = None
            worker.busy_since = None
            worker.gpu.end(self._clock())
            self._release(running.work)
            spec = running.work.spec
            self._report(Outcome(spec.job_id, spec.index, worker.gpu.label,
                                 running.work.synthesis_s, 0.0,
                                 error=f"proving worker died: {exc!r}", call="prove"))  # fmt: skip
        if not self._closing:
            self._start_worker(worker)

    # -- verification -------------------------------------------------------------------------

    def _start_verify(self, work: Work, outcome: Outcome) -> None:
        loop = asyncio.get_running_loop()
        self.verifying += 1
        future = self._synth_pool.submit(self.workload.verify, work.spec, work.buffers,
                                         outcome.proof)  # fmt: skip
        running = _Running("verify", work, self._clock(), future, outcome)
        self._running.add(running)
        future.add_done_callback(lambda _: _threadsafe(loop, self._verified, running))

    def _verified(self, running: _Running) -> None:
        self._running.discard(running)
        work, done, outcome = running.work, running.future, running.outcome
        assert done is not None
        running.future = None  # the future's callback holds ``running``: no cycle for the GC
        assert outcome is not None
        if not running.state.finish():  # abandoned: the attempt failed already
            self._abandoned_returned(running, None)
            return
        self.verifying -= 1
        if done.cancelled():  # the pool shut down before it started: pending in the journal
            self._release(work)
            return
        exc = done.exception()
        error = None
        try:
            if exc is None and not done.result():
                error = "verification failed: the proof does not check"
        except Exception as bad:  # a result whose truth cannot be told
            exc = bad
        if exc is not None:
            error = f"verification failed: {exc!r}"
            if not isinstance(exc, Exception):
                self._task_failed("verify", exc)
        self._release(work)
        if error is not None:
            log.error(error, exc_info=exc, extra=self._context(work, outcome.gpu))
            outcome = Outcome(outcome.job_id, outcome.index, outcome.gpu, outcome.synthesis_s,
                              outcome.gpu_s, error=error, call="verify")  # fmt: skip
        self._report(outcome)

    # -- time limits --------------------------------------------------------------------------

    async def _watch_loop(self) -> None:
        """Abandon calls past their limit, every 1/20 of the shortest limit (10 ms to 1 s)."""
        while True:
            interval = min(max(self.limits.shortest_s() / 20, WATCH_MIN_S), WATCH_MAX_S)
            await asyncio.sleep(interval)
            try:
                self.check_limits()
            except Exception as exc:
                log.exception("checking the calls' time limits failed")
                self._task_failed("pipeline-watchdog", exc)

    def check_limits(self) -> int:
        """Abandon every call that has run past its limit; how many were."""
        now = self._clock()
        limits = {call: self.limits.limit_s(call) for call in CALLS}
        late = [r for r in self._running if now - r.started > limits[r.call]]
        abandoned = 0
        for running in late:
            if running.state.abandon():
                self._abandon(running, limits[running.call])
                abandoned += 1
        for worker in self._workers:
            proving = worker.running
            if proving is None or now - proving.started <= limits["prove"]:
                continue
            if proving.state.abandon():
                self._abandon_prove(worker, proving, limits["prove"])
                abandoned += 1
        return abandoned

    def _abandon(self, running: _Running, limit_s: float) -> None:
        """A synthesis or verification ran past its limit: its attempt fails, its pool thread
        is replaced, its memory stays counted until the call returns."""
        self._running.discard(running)
        assert running.future is not None
        if not running.future.cancel():  # running, not queued: another thread takes its place
            self._synth_pool.replace(running.future)
        work, spec = running.work, running.work.spec
        error = CallTimedOut(running.call, limit_s, spec.job_id, spec.index)
        if running.call == "synthesis":
            self.synthesizing -= 1
            self._synthesis_started.pop(id(work), None)  # no longer counts as running
            self.controller.observe_synthesis_failure(self._clock() - work.dispatched_at)
            outcome = Outcome(spec.job_id, spec.index, None, 0.0, 0.0, error=str(error),
                              call="synthesis")  # fmt: skip
        else:
            self.verifying -= 1
            proved = running.outcome
            assert proved is not None
            outcome = Outcome(spec.job_id, spec.index, proved.gpu, proved.synthesis_s,
                              proved.gpu_s, error=str(error), call=running.call)  # fmt: skip
        self._hold_abandoned(work)
        self._hung(running.call, running.call, error, work, outcome.gpu)
        self._report(outcome)

    def _abandon_prove(self, worker: _Worker, running: _Running, limit_s: float) -> None:
        """A prove ran past its limit: its attempt fails, a new thread takes the worker's
        place, the partition's memory stays counted until the call returns."""
        now = self._clock()
        worker.running = None
        worker.busy_since = None
        worker.gpu.end(now)
        if worker.thread is not None:
            self._abandoned_provers.add(worker.thread)
        work, spec = running.work, running.work.spec
        self._hold_abandoned(work)
        if not self._closing:
            self._start_worker(worker)
        error = CallTimedOut("prove", limit_s, spec.job_id, spec.index)
        self._hung("prove", f"prove-{worker.index}", error, work, worker.gpu.label)
        self._report(Outcome(spec.job_id, spec.index, worker.gpu.label, work.synthesis_s,
                             now - running.started, error=str(error), call="prove"))  # fmt: skip

    def _hold_abandoned(self, work: Work) -> None:
        """The partition leaves the pipeline, but its bytes stay held until its call returns."""
        self.inflight -= 1
        self.abandoned += 1
        self.abandoned_bytes += work.nbytes
        self._wake.set()

    def _abandoned_returned(self, running: _Running, late_buffers: Any) -> None:
        """An abandoned call returned at last: its partition's memory comes back."""
        work = running.work
        elapsed = self._clock() - running.started
        log.warning("an abandoned %s call returned after %s s; its memory is released",
                    running.call, seconds_text(elapsed), extra=self._context(work))  # fmt: skip
        if self._release_buffers is not None:
            for buffers in (work.buffers, late_buffers):
                if buffers is not None:
                    self._release_buffers(buffers)
        work.buffers = None
        self.abandoned -= 1
        self.abandoned_bytes -= work.nbytes
        self.inflight_bytes -= work.nbytes
        self._wake.set()

    def _hung(
        self, call: Call, task: str, error: CallTimedOut, work: Work, gpu: int | None
    ) -> None:
        self.hung_calls[call] += 1
        log.error(
            "%s: abandoned; its thread is left to finish and a new one takes its place; its "
            "%d bytes stay counted until it returns", error, work.nbytes,
            extra=self._context(work, gpu),
        )  # fmt: skip
        if self.observer is not None:
            self.observer.hung_call(call)
        self._task_failed(task, error)

    def _task_failed(self, task: str, exc: BaseException) -> None:
        if self.on_task_failure is None:
            return
        try:
            self.on_task_failure(task, exc)
        except Exception:
            log.exception("reporting the failure of %s failed", task)

    # -- leaving the pipeline -----------------------------------------------------------------

    @staticmethod
    def _context(work: Work, gpu: int | None = None) -> dict[str, object]:
        return {"job": work.spec.job_id, "partition": work.spec.index, "gpu": gpu}

    def _release(self, work: Work) -> None:
        if self._release_buffers is not None and work.buffers is not None:
            self._release_buffers(work.buffers)
        work.buffers = None
        self.inflight -= 1
        self.inflight_bytes -= work.nbytes
        self._wake.set()

    def _report(self, outcome: Outcome) -> None:
        if outcome.job_id in self._cancelled:
            return
        if self.observer is not None:
            self.observer.finished(outcome)
        self._on_outcome(outcome)
