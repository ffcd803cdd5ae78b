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
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from pacer.policy import Caps, DispatchPolicy, Observation
from pacer.workload import PartitionSpec, Proof, Workload

log = logging.getLogger("pacer.pipeline")
MIN_WAIT_S = 0.001


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
    """A partition that left the pipeline: proved (``proof``) or failed (``error``)."""

    job_id: str
    index: int
    gpu: int | None  # the device it was proved on (the worker, when proving on the CPU)
    synthesis_s: float
    gpu_s: float
    proof: Proof | None = None
    error: str | None = None


class Observer(Protocol):
    """What the pipeline reports as it happens (metrics implement it)."""

    def synthesized(self, seconds: float) -> None: ...

    def proved(self, gpu: int, gpu_s: float, phases_s: dict[str, float]) -> None: ...

    def idle_gap(self, gpu: int, seconds: float) -> None: ...

    def finished(self, outcome: Outcome) -> None: ...


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
class _JobQueue:
    seed: int
    params: dict[str, Any]
    indices: deque[int]


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


@dataclass
class _Worker:
    """A proving worker. ``takes`` and ``busy_since`` are written by its thread only."""

    index: int
    gpu: _Gpu
    thread: threading.Thread | None = field(default=None, repr=False)
    takes: int = 0
    busy_since: float | None = None


class Pipeline:
    """Runs partitions of accepted jobs through synthesis and proving, paced by ``controller``.

    ``on_outcome`` is called on the event loop for every partition that leaves the pipeline.
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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.controller = controller
        self.workload = workload
        self.caps = caps
        self.budget_bytes = budget_bytes
        self._on_outcome = on_outcome
        self.observer = observer
        self._release_buffers = getattr(workload, "release", None)
        self._verify_every = verify_every
        self._clock = clock
        # The backlog is a heap of jobs, each with its pending partition indices in order: a
        # job of 100,000 partitions costs one heap entry and a deque of ints.
        self._job_heap: list[tuple[int, int, str]] = []
        self._job_queues: dict[str, _JobQueue] = {}
        self._backlog_count = 0
        # Thread-safe: each proving worker is a thread that takes the next ready partition
        # itself, so a partition costs the event loop two callbacks, not a task and a future.
        self._ready: queue.SimpleQueue[Work | None] = queue.SimpleQueue()
        self._ready_puts = 0
        self._synth_pool = ThreadPoolExecutor(caps.synthesis_concurrency, "pacer-synth")
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
        self._tasks: set[asyncio.Task[Any]] = set()
        self._cancelled: set[str] = set()
        self.synthesizing = 0
        self._synthesis_started: dict[int, float] = {}  # id(work) → dispatch time, in order
        self.verifying = 0
        self.inflight_bytes = 0
        self.inflight = 0  # partitions holding memory
        self.proved = 0
        self._dispatcher: asyncio.Task[None] | None = None

    # -- state ----------------------------------------------------------------------------

    @property
    def backlog(self) -> int:
        return self._backlog_count

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
            backlog=self.backlog,
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
        self, job_id: str, seed: int, params: dict[str, Any], indices: list[int],
        *, priority: int = 0, order: int = 0,
    ) -> None:  # fmt: skip
        """Add partitions of a job to the backlog: higher ``priority`` first, then lower
        ``order`` (the job's arrival), then lower partition index."""
        self._cancelled.discard(job_id)
        queued = self._job_queues.get(job_id)
        if queued is None:
            self._job_queues[job_id] = _JobQueue(seed, params, deque(sorted(set(indices))))
            heapq.heappush(self._job_heap, (-priority, order, job_id))
            self._backlog_count += len(self._job_queues[job_id].indices)
        else:
            before = len(queued.indices)
            queued.indices = deque(sorted({*queued.indices, *indices}))
            self._backlog_count += len(queued.indices) - before
        self._wake.set()

    def cancel(self, job_id: str) -> int:
        """Drop a job's partitions from the backlog (in-flight ones finish, unreported).
        Returns how many were dropped."""
        self._cancelled.add(job_id)
        queued = self._job_queues.pop(job_id, None)
        dropped = 0 if queued is None else len(queued.indices)
        self._backlog_count -= dropped
        self._wake.set()
        return dropped

    # -- running --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the dispatch loop and the proving workers on the running loop."""
        loop = asyncio.get_running_loop()
        self._dispatching = True
        self._dispatcher = asyncio.create_task(self._dispatch_loop(), name="pacer-dispatch")
        for worker in self._workers:
            worker.thread = threading.Thread(
                target=self._prove_loop, args=(worker, loop), name=f"pacer-prove-{worker.index}",
                daemon=True,
            )  # fmt: skip
            worker.thread.start()

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
        """Stop the workers and release the threads (running calls are not interrupted)."""
        self.stop_dispatching()
        if self._dispatcher is not None:
            await self._dispatcher
        for _ in self._workers:
            self._ready.put(None)
        self._synth_pool.shutdown(wait=False, cancel_futures=True)

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
        while self._job_heap:
            job_id = self._job_heap[0][2]
            queued = self._job_queues.get(job_id)
            if queued is None:  # cancelled
                heapq.heappop(self._job_heap)
                continue
            nbytes = self.workload.partition_bytes(queued.params)
            if self.inflight_bytes + nbytes > self.budget_bytes and self.inflight > 0:
                return False  # exact byte budget: wait for memory to come back
            index = queued.indices.popleft()
            if not queued.indices:
                heapq.heappop(self._job_heap)
                del self._job_queues[job_id]
            self._backlog_count -= 1
            spec = PartitionSpec(job_id, index, queued.seed, queued.params)
            work = Work(spec, nbytes, dispatched_at=self._clock())
            self._dispatched += 1
            work.verify = bool(self._verify_every) and self._dispatched % self._verify_every == 0
            self.inflight += 1
            self.inflight_bytes += nbytes
            self.synthesizing += 1
            self._synthesis_started[id(work)] = work.dispatched_at
            self._start_synthesis(work)
            return True
        return False

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _start_synthesis(self, work: Work) -> None:
        # A bare future and a callback rather than a task per partition: cheaper on the loop.
        loop = asyncio.get_running_loop()
        future = self._synth_pool.submit(self.workload.synthesize, work.spec)
        future.add_done_callback(
            lambda done: loop.call_soon_threadsafe(self._synthesized, work, done)
        )

    def _synthesized(self, work: Work, done: Future[Any]) -> None:
        self.synthesizing -= 1
        self._synthesis_started.pop(id(work), None)
        exc: BaseException | None = CancelledError() if done.cancelled() else done.exception()
        if exc is not None:
            log.error("synthesis failed: %r", exc, exc_info=exc, extra=self._context(work))
            self._release(work)
            self._report(Outcome(work.spec.job_id, work.spec.index, None, 0.0, 0.0,
                                 error=f"synthesis failed: {exc!r}"))  # fmt: skip
            return
        work.buffers = done.result()
        work.synthesis_s = self._clock() - work.dispatched_at
        self.controller.observe_synthesis(work.synthesis_s)
        if self.observer is not None:
            self.observer.synthesized(work.synthesis_s)
        self._ready_puts += 1
        self._ready.put(work)
        self._wake.set()

    def _prove_loop(self, worker: _Worker, loop: asyncio.AbstractEventLoop) -> None:
        """A proving worker's thread: take the next ready partition, prove it, report.

        The thread marks itself busy in its own fields (read by the loop for observations),
        so a partition costs the loop one callback.
        """
        while True:
            work = self._ready.get()
            if work is None:
                return
            start = self._clock()
            worker.busy_since = start
            worker.takes += 1
            gap = worker.gpu.begin(start)
            proof: Proof | None = None
            error: str | None = None
            try:
                if self._prove_keeps:
                    prove: Any = self.workload.prove  # takes the optional keep_output
                    proof = prove(work.buffers, worker.index, keep_output=work.verify)
                else:
                    proof = self.workload.prove(work.buffers, worker.index)
            except Exception as exc:
                error = f"proving failed: {exc!r}"
                log.exception("proving failed", extra=self._context(work, worker.gpu.label))
            end = self._clock()
            worker.gpu.end(end)
            loop.call_soon_threadsafe(self._proved, worker, work, start, end, gap, proof, error)
            worker.busy_since = None

    def _proved(
        self, worker: _Worker, work: Work, start: float, end: float, gap: float | None,
        proof: Proof | None, error: str | None,
    ) -> None:  # fmt: skip
        if gap is not None and self.observer is not None:
            self.observer.idle_gap(worker.gpu.label, gap)
        spec = work.spec
        outcome = Outcome(spec.job_id, spec.index, worker.gpu.label, work.synthesis_s, end - start,
                          proof, error)  # fmt: skip
        if proof is not None:
            self.proved += 1
            self.controller.observe_gpu_service(end - start)
            if self.observer is not None:
                self.observer.proved(worker.gpu.label, end - start, proof.phases_s)
            if work.verify:
                self.verifying += 1
                self._spawn(self._verify(work, outcome))
                return
        self._release(work)
        self._report(outcome)

    @staticmethod
    def _context(work: Work, gpu: int | None = None) -> dict[str, object]:
        return {"job": work.spec.job_id, "partition": work.spec.index, "gpu": gpu}

    async def _verify(self, work: Work, outcome: Outcome) -> None:
        loop = asyncio.get_running_loop()
        assert outcome.proof is not None
        try:
            ok = await loop.run_in_executor(
                self._synth_pool, self.workload.verify, work.spec, work.buffers, outcome.proof
            )
            error = None if ok else "verification failed: the proof does not check"
        except Exception as exc:
            error = f"verification failed: {exc!r}"
        self.verifying -= 1
        self._release(work)
        if error is not None:
            log.error(error, extra=self._context(work, outcome.gpu))
            outcome = Outcome(outcome.job_id, outcome.index, outcome.gpu,
                              outcome.synthesis_s, outcome.gpu_s, error=error)  # fmt: skip
        self._report(outcome)

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
