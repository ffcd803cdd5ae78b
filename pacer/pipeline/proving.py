"""The proving workers: each thread takes the next ready partition, proves it and reports.

A worker's thread marks itself busy in its `Worker` fields, which the loop reads. So a partition
costs the loop one callback. Busy time is kept per GPU (`GpuBusy`).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from pacer.pipeline.attempts import proof_problem
from pacer.pipeline.busy import BusyMeter, GpuBusy
from pacer.pipeline.work import Running, Work, threadsafe
from pacer.runtime.supervision import ProgressWatchdog
from pacer.workload import Proof, Workload

log = logging.getLogger("pacer.pipeline")


@dataclass
class Worker:
    """A proving worker. Its thread writes ``takes``, ``busy_since`` and ``running``.

    The loop writes them too when it abandons the call; the thread then writes none of them.
    """

    index: int
    gpu: GpuBusy
    thread: threading.Thread | None = field(default=None, repr=False)
    takes: int = 0
    busy_since: float | None = None
    running: Running | None = None


Proved = Callable[
    [Worker, Work, float, float, float | None, Proof | None, str | None, BaseException | None],
    None,
]
"""On the loop: (worker, work, start, end, the idle gap it ended, proof, error, what prove
raised)."""


Gate = Callable[[str, int], tuple[int, int] | None]
"""Asked on a worker's thread before it proves a partition (job id, index): the lease to prove
it under (a fleet's batch and token), or None: not proved (the lease lapsed or was lost)."""


class ProvingWorkers:
    """``count`` workers proving ``workload``'s partitions from their queue.

    The loop hears of each proof through ``proved``, of a thread ended by pacer's own error through
    ``died``, and of an abandoned prove that returned through ``returned``. ``progress`` says when
    partitions have waited for or sat on the workers for ``stall_s()`` seconds (the prove limit)
    with no prove returning: no worker is making progress. With a ``gate``, a partition it
    refuses is not proved: the loop hears of it through ``refused``.
    """

    def __init__(
        self,
        workload: Workload,
        count: int,
        clock: Callable[[], float],
        *,
        proved: Proved,
        died: Callable[[Worker, threading.Thread, BaseException], None],
        returned: Callable[[Running, None], None],
        stall_s: Callable[[], float],
        refused: Callable[[Work], None],
    ) -> None:
        self.workload = workload
        self.gate: Gate | None = None
        self._on_refused = refused
        self._clock = clock
        self._on_proved = proved
        self._on_died = died
        self._on_returned = returned
        # Thread-safe: each worker's thread takes the next ready partition itself.
        self._ready: queue.SimpleQueue[Work | None] = queue.SimpleQueue()
        self._puts = 0
        self.gpus: dict[int, GpuBusy] = {}
        for index in range(count):
            label = workload.device_of(index)
            self.gpus.setdefault(label, GpuBusy(label, BusyMeter(clock)))
        self.workers = [Worker(i, self.gpus[workload.device_of(i)]) for i in range(count)]
        self._abandoned: set[threading.Thread] = set()
        self.progress = ProgressWatchdog(
            stall_s, lambda: self.ready > 0 or self.busy > 0, clock,
            what="no GPU worker making progress: partitions wait and no prove returned",
        )  # fmt: skip

    @property
    def ready(self) -> int:
        """Partitions waiting in the queue for a worker."""
        return self._puts - sum(w.takes for w in self.workers)

    @property
    def busy(self) -> int:
        """Workers proving now."""
        return sum(w.busy_since is not None for w in self.workers)

    @property
    def live(self) -> int:
        """Workers whose thread runs or has yet to start."""
        return sum(w.thread is None or w.thread.is_alive() for w in self.workers)

    @property
    def abandoned_threads(self) -> int:
        """Threads still running a prove that was abandoned."""
        self._abandoned = {t for t in self._abandoned if t.is_alive()}
        return len(self._abandoned)

    def busy_ages(self, now: float) -> tuple[float, ...]:
        """Age (s) of the partition on each busy worker, oldest first."""
        ages = []
        for worker in self.workers:
            since = worker.busy_since  # written by the worker's thread: read once
            if since is not None:
                ages.append(max(0.0, now - since))
        return tuple(sorted(ages, reverse=True))

    def put(self, work: Work) -> None:
        self.progress.observe()  # partitions arriving at idle workers start the stall clock
        self._puts += 1
        self._ready.put(work)
        self.progress.observe()

    def start(self) -> None:
        """Start every worker's thread (on the running loop)."""
        for worker in self.workers:
            self.start_thread(worker)

    def start_thread(self, worker: Worker) -> None:
        """Start a thread for ``worker``, replacing any it had."""
        loop = asyncio.get_running_loop()
        worker.thread = threading.Thread(
            target=self._prove_loop, args=(worker, loop), name=f"pacer-prove-{worker.index}",
            daemon=True,
        )  # fmt: skip
        worker.thread.start()

    def stop(self) -> None:
        """Tell each thread to end after its current partition, without waiting."""
        for _ in self.workers:
            self._ready.put(None)

    def late(self, now: float, limit_s: float) -> list[tuple[Worker, Running]]:
        """The workers whose prove has run past ``limit_s``, with the call."""
        out = []
        for worker in self.workers:
            running = worker.running
            if running is not None and now - running.started > limit_s:
                out.append((worker, running))
        return out

    def vacate(self, worker: Worker, now: float, *, abandoned: bool) -> None:
        """Free ``worker`` of what it held, because its thread died or its call was ``abandoned``.

        An abandoned thread is left to finish and counted until it does.
        """
        worker.running = None
        worker.busy_since = None
        worker.gpu.end(now)
        if abandoned and worker.thread is not None:
            self._abandoned.add(worker.thread)

    def _prove_loop(self, worker: Worker, loop: asyncio.AbstractEventLoop) -> None:
        """A worker's thread; if pacer's own code fails, the loop starts a new one."""
        try:
            self._prove_until_closed(worker, loop)
        except BaseException as exc:
            threadsafe(loop, self._on_died, worker, threading.current_thread(), exc)

    def _prove_until_closed(self, worker: Worker, loop: asyncio.AbstractEventLoop) -> None:
        """Take, prove and report ready partitions until told to stop (None).

        If the call was abandoned meanwhile, this thread hands the memory back and ends.
        """
        while True:
            work = self._ready.get()
            if work is None:
                return
            if self.gate is not None:
                work.lease = self.gate(work.spec.job_id, work.spec.index)
                if work.lease is None:
                    worker.takes += 1
                    threadsafe(loop, self._on_refused, work)
                    continue
            start = self._clock()
            running = Running("prove", work, start)
            worker.running = running
            worker.busy_since = start
            worker.takes += 1
            gap = worker.gpu.begin(start)
            proof, error, raised = self._prove_one(worker, work)
            end = self._clock()
            if not running.state.finish():
                threadsafe(loop, self._on_returned, running, None)
                return
            worker.running = None
            worker.gpu.end(end)
            threadsafe(loop, self._on_proved, worker, work, start, end, gap, proof, error, raised)
            worker.busy_since = None

    def _prove_one(
        self, worker: Worker, work: Work
    ) -> tuple[Proof | None, str | None, BaseException | None]:
        """Return (proof, None, None), or (None, reason, the exception prove raised if any)."""
        context = work.context(worker.gpu.label)
        try:
            proof = self.workload.prove(work.buffers, worker.index, keep_output=work.verify)
        except BaseException as exc:
            log.error("proving failed: %r", exc, exc_info=exc, extra=context)
            return None, f"proving failed: {exc!r}", exc
        problem = proof_problem(proof)
        if problem is not None:
            log.error("proving failed: %s", problem, extra=context)
            return None, problem, None
        return proof, None, None
