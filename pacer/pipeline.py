"""The asyncio pipeline: backlog → paced dispatch → synthesis → ready queue → proving workers.

The dispatch loop asks the controller (the same object the simulator drives) how many
partitions to start and when to ask again, and wakes early on every pipeline event. Synthesis
runs on a thread pool sized to the synthesis-concurrency cap: NumPy and native provers release
the GIL, and the buffers stay in this process, ready for the proving worker (and the pinned
pool) without a copy. Each proving worker has its own thread. Every partition holds its bytes
against the memory budget from dispatch until its proving (GPU copy included) has finished.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from pacer.controller import Caps, Observation, PIController
from pacer.workload import PartitionSpec, Proof, Workload

log = logging.getLogger("pacer.pipeline")


@dataclass
class Work:
    """One partition on its way through the pipeline."""

    spec: PartitionSpec
    nbytes: int
    dispatched_at: float = 0.0
    synthesis_s: float = 0.0
    buffers: Any = None


@dataclass(frozen=True)
class Outcome:
    """A partition that left the pipeline: proved (``proof``) or failed (``error``)."""

    job_id: str
    index: int
    worker: int | None
    synthesis_s: float
    gpu_s: float
    proof: Proof | None = None
    error: str | None = None


class Observer(Protocol):
    """What the pipeline reports as it happens (metrics implement it)."""

    def synthesized(self, seconds: float) -> None: ...

    def proved(self, worker: int, gpu_s: float, phases_s: dict[str, float]) -> None: ...

    def idle_gap(self, worker: int, seconds: float) -> None: ...

    def finished(self, outcome: Outcome) -> None: ...


class BusyMeter:
    """Fraction of the trailing ``window_s`` a worker spent proving, from 1-s snapshots."""

    def __init__(self, clock: Callable[[], float], window_s: float = 60.0) -> None:
        self._clock = clock
        self._window_s = window_s
        self._started = clock()
        self._busy_total = 0.0
        self._busy_since: float | None = None
        self._snapshots: deque[tuple[float, float]] = deque([(self._started, 0.0)])

    def start(self, now: float) -> None:
        self._snapshot(now)
        self._busy_since = now

    def stop(self, now: float) -> None:
        if self._busy_since is not None:
            self._busy_total += now - self._busy_since
            self._busy_since = None
        self._snapshot(now)

    def busy_seconds(self, now: float) -> float:
        extra = 0.0 if self._busy_since is None else now - self._busy_since
        return self._busy_total + extra

    def ratio(self) -> float:
        now = self._clock()
        self._snapshot(now)
        since = max(self._started, now - self._window_s)
        then = self._busy_at(since)
        span = now - since
        return 0.0 if span <= 0 else min(1.0, (self.busy_seconds(now) - then) / span)

    def _snapshot(self, now: float) -> None:
        if now - self._snapshots[-1][0] >= 1.0:
            self._snapshots.append((now, self.busy_seconds(now)))
            while len(self._snapshots) > 2 and self._snapshots[1][0] <= now - self._window_s:
                self._snapshots.popleft()

    def _busy_at(self, t: float) -> float:
        best = self._snapshots[0]
        for snap in self._snapshots:
            if snap[0] <= t:
                best = snap
        return best[1]


@dataclass
class _Worker:
    index: int
    meter: BusyMeter
    thread: ThreadPoolExecutor
    last_end: float | None = None
    busy: bool = False
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class Pipeline:
    """Runs partitions of accepted jobs through synthesis and proving, paced by ``controller``.

    ``on_outcome`` is called on the event loop for every partition that leaves the pipeline.
    """

    def __init__(
        self,
        controller: PIController,
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
        self._verify_every = verify_every
        self._clock = clock
        self._backlog: list[tuple[int, int, int, PartitionSpec, int]] = []
        self._backlog_per_job: dict[str, int] = {}
        self._ready: asyncio.Queue[Work | None] = asyncio.Queue()
        self._synth_pool = ThreadPoolExecutor(caps.synthesis_concurrency, "pacer-synth")
        self._workers = [
            _Worker(i, BusyMeter(clock), ThreadPoolExecutor(1, f"pacer-prove-{i}"))
            for i in range(workers)
        ]
        self._wake = asyncio.Event()
        self._dispatching = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._cancelled: set[str] = set()
        self.synthesizing = 0
        self.verifying = 0
        self.inflight_bytes = 0
        self.inflight = 0  # partitions holding memory
        self.proved = 0
        self._dispatcher: asyncio.Task[None] | None = None

    # -- state ----------------------------------------------------------------------------

    @property
    def backlog(self) -> int:
        return sum(self._backlog_per_job.values())

    @property
    def ready(self) -> int:
        return self._ready.qsize()

    @property
    def gpu_busy(self) -> int:
        return sum(w.busy for w in self._workers)

    @property
    def workers(self) -> int:
        return len(self._workers)

    def busy_ratio(self, worker: int) -> float:
        return self._workers[worker].meter.ratio()

    def busy_seconds(self, worker: int) -> float:
        return self._workers[worker].meter.busy_seconds(self._clock())

    def observation(self) -> Observation:
        return Observation(
            ready=self.ready,
            synthesizing=self.synthesizing,
            gpu_busy=self.gpu_busy,
            gpu_workers=len(self._workers),
            backlog=self.backlog,
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
        for index in indices:
            spec = PartitionSpec(job_id, index, seed, params)
            heapq.heappush(self._backlog, (-priority, order, index, spec, 0))
        self._backlog_per_job[job_id] = self._backlog_per_job.get(job_id, 0) + len(indices)
        self._wake.set()

    def cancel(self, job_id: str) -> int:
        """Drop a job's partitions from the backlog (in-flight ones finish, unreported).
        Returns how many were dropped."""
        self._cancelled.add(job_id)
        dropped = self._backlog_per_job.pop(job_id, 0)
        self._wake.set()
        return dropped

    # -- running --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the dispatch loop and the proving workers on the running loop."""
        self._dispatching = True
        self._dispatcher = asyncio.create_task(self._dispatch_loop(), name="pacer-dispatch")
        for worker in self._workers:
            worker.task = asyncio.create_task(self._work(worker), name=f"pacer-w{worker.index}")

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
        for worker in self._workers:
            if worker.task is not None:
                worker.task.cancel()
        await asyncio.gather(*(w.task for w in self._workers if w.task), return_exceptions=True)
        self._synth_pool.shutdown(wait=False, cancel_futures=True)
        for worker in self._workers:
            worker.thread.shutdown(wait=False, cancel_futures=True)

    async def _dispatch_loop(self) -> None:
        while self._dispatching:
            decision = self.controller.decide(self.observation())
            for _ in range(decision.dispatch):
                if not self._dispatch_one():
                    break
            self._wake.clear()
            timeout = None if decision.next_at is None else decision.next_at - self._clock()
            if timeout is not None and timeout <= 0:
                await asyncio.sleep(0)
                continue
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def _dispatch_one(self) -> bool:
        while self._backlog:
            _, _, _, spec, _ = self._backlog[0]
            if spec.job_id in self._cancelled:
                heapq.heappop(self._backlog)
                continue
            nbytes = self.workload.partition_bytes(spec.params)
            if self.inflight_bytes + nbytes > self.budget_bytes and self.inflight > 0:
                return False  # exact byte budget: wait for memory to come back
            heapq.heappop(self._backlog)
            self._backlog_per_job[spec.job_id] -= 1
            if self._backlog_per_job[spec.job_id] == 0:
                del self._backlog_per_job[spec.job_id]
            work = Work(spec, nbytes, dispatched_at=self._clock())
            self.inflight += 1
            self.inflight_bytes += nbytes
            self.synthesizing += 1
            self._spawn(self._synthesize(work))
            return True
        return False

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _synthesize(self, work: Work) -> None:
        loop = asyncio.get_running_loop()
        try:
            work.buffers = await loop.run_in_executor(
                self._synth_pool, self.workload.synthesize, work.spec
            )
        except Exception as exc:
            self.synthesizing -= 1
            log.exception("synthesis failed", extra=self._context(work))
            self._release(work)
            self._report(Outcome(work.spec.job_id, work.spec.index, None, 0.0, 0.0,
                                 error=f"synthesis failed: {exc!r}"))  # fmt: skip
            return
        work.synthesis_s = self._clock() - work.dispatched_at
        self.synthesizing -= 1
        self.controller.observe_synthesis(work.synthesis_s)
        if self.observer is not None:
            self.observer.synthesized(work.synthesis_s)
        self._ready.put_nowait(work)
        self._wake.set()

    async def _work(self, worker: _Worker) -> None:
        loop = asyncio.get_running_loop()
        while True:
            work = await self._ready.get()
            if work is None:
                return
            start = self._clock()
            if worker.last_end is not None and self.observer is not None:
                self.observer.idle_gap(worker.index, start - worker.last_end)
            worker.busy = True
            worker.meter.start(start)
            self._wake.set()
            proof: Proof | None = None
            error: str | None = None
            try:
                proof = await loop.run_in_executor(
                    worker.thread, self.workload.prove, work.buffers, worker.index
                )
            except Exception as exc:
                error = f"proving failed: {exc!r}"
                log.exception("proving failed", extra=self._context(work, worker.index))
            end = self._clock()
            worker.busy, worker.last_end = False, end
            worker.meter.stop(end)
            spec = work.spec
            outcome = Outcome(spec.job_id, spec.index, worker.index, work.synthesis_s,
                              end - start, proof, error)  # fmt: skip
            if proof is not None:
                self.proved += 1
                self.controller.observe_gpu_service(end - start)
                if self.observer is not None:
                    self.observer.proved(worker.index, end - start, proof.phases_s)
                if self._verify_every and self.proved % self._verify_every == 0:
                    self.verifying += 1
                    self._spawn(self._verify(work, outcome))
                    continue
            self._release(work)
            self._report(outcome)

    @staticmethod
    def _context(work: Work, worker: int | None = None) -> dict[str, object]:
        return {"job": work.spec.job_id, "partition": work.spec.index, "gpu": worker}

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
            log.error(error, extra=self._context(work, outcome.worker))
            outcome = Outcome(outcome.job_id, outcome.index, outcome.worker,
                              outcome.synthesis_s, outcome.gpu_s, error=error)  # fmt: skip
        self._report(outcome)

    def _release(self, work: Work) -> None:
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
