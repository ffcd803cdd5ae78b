"""The service's lifecycle: start-up, serving, SIGTERM drain, shutdown.

start: open the journal, restore the controller's estimates, load the workload, resume the jobs
the journal holds unfinished (completed partitions are not redone), start the pipeline and the
HTTP API, then report ready (``READY=1`` to systemd when ``NOTIFY_SOCKET`` is set).

The first SIGTERM or SIGINT drains: ``/readyz`` fails and new jobs get 503, dispatch stops,
in-flight partitions may finish within ``PACER_SHUTDOWN__DRAIN_S``, results and estimates are
committed, and the process exits 0; what did not finish stays in the journal for the next
start. A second signal exits at once (status 1); the journal loses nothing it had committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import inspect
import ipaddress
import logging
import math
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from types import EllipsisType
from typing import Any, TypeVar

from aiohttp import web
from prometheus_client import CollectorRegistry

from pacer.api import build_app
from pacer.baselines import CuzkPacer, Unpaced
from pacer.config import ControllerSettings, Settings
from pacer.controller import PIController
from pacer.estimates import Estimates, estimates_key
from pacer.journal import JobRecord, JobState, Journal, PartitionResult, UnknownJob
from pacer.metrics import Metrics
from pacer.pipeline import Outcome, Pipeline
from pacer.policy import Caps, DispatchPolicy, PolicyConflictError
from pacer.workload import Workload, job_seed, load_workload

log = logging.getLogger("pacer.service")
T = TypeVar("T")
SWITCH_INTERVAL_S = 0.001
DEFAULT_SYNTHESIS_THREADS = 4  # a workload that does not say how many threads it keeps busy
GC_YOUNG_THRESHOLD = 50_000
UPKEEP_S = 60.0
POOL_FIELDS = ("backend", "total_bytes", "in_use_bytes", "slots_total", "slots_free", "checkouts",
               "waits", "fallbacks", "allocations_after_warmup")  # fmt: skip


class ConfigurationError(Exception):
    """The settings describe a service that cannot start; the message says why."""


def check_bind(settings: Settings) -> None:
    """Refuse a non-loopback address without a token, unless explicitly allowed."""
    host = settings.api.host
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and settings.api.token is None and not settings.api.allow_public:
        raise ConfigurationError(
            f"PACER_API__HOST={host} is not a loopback address: set PACER_API__TOKEN, or "
            "PACER_API__ALLOW_PUBLIC=true to serve it without authentication"
        )


def build_policy(
    settings: ControllerSettings,
    caps: Caps,
    clock: Callable[[], float],
    estimates: Estimates | None = None,
) -> DispatchPolicy:
    """The dispatch policy ``settings.policy`` names: the PI controller (warm when there are
    ``estimates``), or a baseline to compare it with, bounded as in the simulator by the
    memory cap alone."""
    if settings.policy == "unpaced":
        return Unpaced(caps.inflight_partitions)
    if settings.policy == "cuzk":
        return CuzkPacer(caps.inflight_partitions, clock)
    return PIController(settings, caps, clock, estimates)


def sd_notify(message: str) -> bool:
    """Send ``message`` to systemd's notify socket, if there is one (sd_notify protocol)."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(address)
            sock.sendall(message.encode())
        except OSError as exc:
            log.warning("sd_notify failed: %s", exc)
            return False
    return True


class Service:
    """One pacer instance: journal, dispatch policy, pipeline, metrics and API."""

    def __init__(
        self,
        settings: Settings,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_bind(settings)
        self.settings = settings
        self.registry = registry or CollectorRegistry()
        self.ready = False
        self.draining = False
        self.port: int | None = None
        self._clock = clock
        self._pending: list[PartitionResult] = []
        self._runner: web.AppRunner | None = None
        self._committer: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._order = 0
        self._started_jobs: set[str] = set()
        self.workload: Workload = load_workload(settings)
        self.verify_every = _or_workload_says(settings.verify_every, self.workload,
                                              "verify_every", 1)  # fmt: skip
        # The journal lives on a thread of its own: an fsync must never stall the event loop.
        self._db = ThreadPoolExecutor(1, "pacer-journal")
        try:
            self.journal: Journal = self._db.submit(Journal, settings.journal.path).result()
        except BaseException:
            self._db.shutdown()
            raise
        self.partition_bytes = int(settings.memory.partition_bytes) or max(
            1, self.workload.partition_bytes({})
        )
        budget = int(settings.memory.budget_bytes)
        if self.partition_bytes > budget:
            raise ConfigurationError(
                f"one partition takes {self.partition_bytes} bytes, more than "
                f"PACER_MEMORY__BUDGET_BYTES={budget}"
            )
        self.threads_per_synthesis = _or_workload_says(
            settings.synthesis.threads_per_synthesis, self.workload, "threads_per_synthesis",
            DEFAULT_SYNTHESIS_THREADS,
        )  # fmt: skip
        self.caps = Caps.from_host(
            cores=settings.synthesis.cores,
            threads_per_synthesis=self.threads_per_synthesis,
            max_concurrent=settings.synthesis.max_concurrent,
            budget_bytes=budget,
            partition_bytes=self.partition_bytes,
        )
        workers = getattr(self.workload, "workers", settings.gpu.workers)
        self.estimates_key = _estimates_key(
            settings, self.workload, self.partition_bytes, self.threads_per_synthesis, workers
        )
        estimates = self._saved_estimates()
        self.policy = build_policy(settings.controller, self.caps, clock, estimates)
        self.pipeline = Pipeline(
            # The pipeline calls only what every DispatchPolicy has (decide, observe_*).
            self.policy,
            self.workload,
            self.caps,
            workers=workers,
            budget_bytes=budget,
            on_outcome=self._on_outcome,
            verify_every=self.verify_every,
            clock=clock,
        )
        self.metrics = Metrics(self.registry, self.policy, self.pipeline, self.policy_name)
        self.pipeline.observer = self.metrics

    def _saved_estimates(self) -> Estimates | None:
        """The estimates the journal holds, if they were saved under this host's and
        workload's key; others describe another regime, and a cold start is better."""
        saved = self._db.submit(self.journal.load_estimates).result()
        if saved is None:
            return None
        key = self._db.submit(self.journal.load_estimates_key).result()
        if key != self.estimates_key:
            log.info(
                "saved estimates not used: saved for %s, this start is %s",
                key or "an unrecorded workload", self.estimates_key,
            )  # fmt: skip
            return None
        return _estimates(saved)

    @property
    def policy_name(self) -> str:
        """The dispatch policy running: pi, or a baseline (``PACER_CONTROLLER__POLICY``)."""
        return self.settings.controller.policy

    @property
    def controller(self) -> PIController:
        """The PI controller; PolicyConflictError while a baseline policy dispatches."""
        if isinstance(self.policy, PIController):
            return self.policy
        raise PolicyConflictError(self.policy_name, "only the pi policy has a PI controller")

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        # The loop shares the GIL with synthesis and proving threads; by default a thread may
        # keep it 5 ms before the loop gets a turn, which is loop lag. 1 ms keeps lag low.
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        await self._prepare_workload()
        resumed = await self._resume()
        self.pipeline.start()
        self._committer = asyncio.create_task(self._commit_loop(), name="pacer-journal")
        self._runner = web.AppRunner(build_app(self), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.api.host, self.settings.api.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        self.ready = True
        # Start-up objects (modules, settings, the resumed backlog) live as long as the process:
        # keep them out of the collector's full passes, which otherwise stall the loop.
        gc.freeze()
        # Young collections every 700 allocations land inside one dispatch decision in twenty
        # at thousands of partitions/s; fifty thousand makes them rare, each still ~1 ms.
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
        log.info(
            "pacer ready on http://%s:%d (workload %s, policy %s, %d workers, %d jobs resumed)",
            self.settings.api.host, self.port, self.workload.name, self.policy_name,
            self.pipeline.workers, resumed,
        )  # fmt: skip
        sd_notify(f"READY=1\nSTATUS=serving on port {self.port}, {resumed} jobs resumed")

    async def _prepare_workload(self) -> None:
        """Let the workload allocate what it holds for the whole run (the pinned pool), on a
        thread and before readiness: pinning host memory runs at about 2 GiB/s."""
        prepare = getattr(self.workload, "prepare", None)
        if prepare is None:
            return
        slots = self.settings.gpu.pool_slots or self.pool_slots_needed()
        wanted = self.pool_slots_wanted()
        if not self.settings.gpu.pool_slots and slots < wanted:
            log.warning(
                "the memory budget (PACER_MEMORY__BUDGET_BYTES, %.1f GiB) holds %d partitions "
                "of %.2f GiB, fewer than the %d (%.1f GiB) that every synthesis the cores allow, "
                "the ready buffer and the proving workers keep in flight: the GPUs may wait on "
                "synthesis; raise the budget if the host has the memory",
                self.settings.memory.budget_bytes / 2**30, slots, self.partition_bytes / 2**30,
                wanted, wanted * self.partition_bytes / 2**30,
            )  # fmt: skip
        log.info("pinning %d pool slots of %.2f GiB before ready", slots,
                 self.partition_bytes / 2**30)  # fmt: skip
        started = self._clock()
        budget = int(self.settings.memory.budget_bytes)
        if "synthesis_workers" in inspect.signature(prepare).parameters:
            prepare = functools.partial(prepare, synthesis_workers=self.caps.synthesis_concurrency)
        await asyncio.get_running_loop().run_in_executor(None, prepare, slots, budget)
        pool = self.pipeline.pool
        log.info(
            "pinned pool ready: %d slots, %.1f GiB in %.1f s",
            slots, (pool.total_bytes if pool else 0) / 2**30, self._clock() - started,
        )  # fmt: skip

    def pool_slots_needed(self) -> int:
        """Pinned slots for every partition the controller keeps in flight
        (`pool_slots_wanted`), at most what the memory budget holds."""
        return min(self.caps.inflight_partitions, self.pool_slots_wanted())

    def pool_slots_wanted(self) -> int:
        """One slot per synthesis the cores allow, twice the ready setpoint, one per proving
        worker."""
        ready = math.ceil(2 * self.settings.controller.target_ready)
        return self.caps.synthesis_concurrency + ready + self.pipeline.workers

    async def shutdown(self) -> bool:
        """Drain and stop. True if all in-flight work finished within the drain budget."""
        self.draining = True
        sd_notify("STOPPING=1\nSTATUS=draining")
        drain_s = self.settings.shutdown.drain_s
        log.info("draining: dispatch stopped, %.0f s for in-flight work", drain_s)
        finished = await self.pipeline.drain(drain_s)
        if not finished:
            log.warning(
                "drain budget of %.0f s spent; %d partitions left to the journal",
                drain_s, self.pipeline.inflight,
            )  # fmt: skip
        if self._committer is not None:
            self._committer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._committer
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._flush()
        await self._save_estimates()
        await self.pipeline.close()
        close_workload = getattr(self.workload, "close", None)
        if close_workload is not None:
            await asyncio.get_running_loop().run_in_executor(None, close_workload)
        if self._runner is not None:
            await self._runner.cleanup()
        await self.db(self.journal.close)
        self._db.shutdown()
        log.info("stopped")
        return finished

    async def db(self, call: Callable[..., T], *args: Any) -> T:
        """Run a journal call on the journal's thread."""
        return await asyncio.wrap_future(self._db.submit(call, *args))

    async def _resume(self) -> int:
        jobs = await self.db(self.journal.incomplete)
        for job, pending in jobs:
            self._enqueue(job, pending)
        return len(jobs)

    # -- jobs ---------------------------------------------------------------------------------

    async def submit(self, partitions: int, params: dict[str, Any], priority: int) -> JobRecord:
        """Journal a job (durable on return), then queue its partitions."""
        job = await self.db(self.journal.add_job, partitions, self.workload.name, params, priority)
        self._enqueue(job, list(range(partitions)))
        log.info("job accepted: %d partitions", partitions, extra={"job": job.id})
        return job

    def _enqueue(self, job: JobRecord, indices: list[int]) -> None:
        self._order += 1
        seed = job_seed(job.id, job.params)
        self.pipeline.enqueue(
            job.id, seed, job.params, indices, priority=job.priority, order=self._order
        )

    async def cancel(self, job_id: str) -> dict[str, Any] | None:
        """Cancel a queued or running job; a finished one is returned as it is."""
        before = await self.db(self.journal.get_job, job_id)
        if before is None:
            return None
        job = await self.db(self.journal.cancel, job_id) or before
        if before.state in (JobState.QUEUED, JobState.RUNNING):
            dropped = self.pipeline.cancel(job_id)
            self._started_jobs.discard(job_id)
            self.metrics.job_ended("cancelled")
            log.info("job cancelled, %d partitions dropped", dropped, extra={"job": job_id})
        return _job_json(job)

    def _on_outcome(self, outcome: Outcome) -> None:
        if outcome.job_id not in self._started_jobs:
            self._started_jobs.add(outcome.job_id)
            self._db.submit(self._mark_running, outcome.job_id)
        if outcome.error is not None or outcome.proof is None:
            self._spawn(self._fail(outcome))
            return
        self._pending.append(
            PartitionResult(
                job_id=outcome.job_id,
                index=outcome.index,
                digest=outcome.proof.digest,
                synthesis_s=outcome.synthesis_s,
                gpu_s=outcome.gpu_s,
                phases=outcome.proof.phases_s,
                gpu=outcome.gpu,
            )
        )

    def _mark_running(self, job_id: str) -> None:
        with contextlib.suppress(UnknownJob):
            self.journal.mark_running(job_id)

    async def _fail(self, outcome: Outcome) -> None:
        before = await self.db(self.journal.get_job, outcome.job_id)
        if before is None or before.state not in (JobState.QUEUED, JobState.RUNNING):
            return
        error = outcome.error or "proving returned no proof"
        job = await self.db(self.journal.fail_partition, outcome.job_id, outcome.index, error)
        self.pipeline.cancel(outcome.job_id)
        self.metrics.job_ended("failed")
        context = {"job": job.id, "partition": outcome.index, "gpu": outcome.gpu}
        log.error("job failed: %s", job.error, extra=context)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _commit_loop(self) -> None:
        """Commit results in batches; now and then save the estimates and prune old jobs."""
        interval = self.settings.journal.commit_interval_s
        last_upkeep = -math.inf
        while True:
            await asyncio.sleep(interval)
            await self._flush()
            if self._clock() - last_upkeep >= UPKEEP_S:
                last_upkeep = self._clock()
                await self._upkeep()

    async def _upkeep(self) -> None:
        # Estimates saved as we go, so that even a killed service restarts warm.
        await self._save_estimates()
        pruned = await self.db(self.journal.prune, self.settings.journal.retention_s)
        if pruned:
            log.info("pruned %d finished jobs older than the retention", pruned)

    async def _save_estimates(self) -> None:
        """Save the PI controller's estimates, with the key they are valid for. A baseline
        keeps none, nor does a controller that has learned nothing yet: the saved ones stay
        for the next start they fit."""
        if isinstance(self.policy, PIController) and self.policy.estimates.known:
            await self.db(
                self.journal.save_estimates, asdict(self.policy.estimates), self.estimates_key
            )

    async def _flush(self) -> None:
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        for job in await self.db(self._commit, batch):
            self._started_jobs.discard(job.id)
            if job.state is JobState.COMPLETED:
                self.metrics.job_ended("completed")
                log.info("job completed: %s", job.result_digest, extra={"job": job.id})

    def _commit(self, batch: list[PartitionResult]) -> list[JobRecord]:
        """On the journal's thread: commit a batch; one bad result must not lose the others."""
        try:
            return self.journal.complete_partitions(batch)
        except (UnknownJob, ValueError) as exc:
            log.error("journal refused a batch (%s); committing one by one", exc)
        ended: list[JobRecord] = []
        for item in batch:
            try:
                ended += self.journal.complete_partitions([item])
            except (UnknownJob, ValueError) as exc:
                context = {"job": item.job_id, "partition": item.index}
                log.error("result dropped: %s", exc, extra=context)
        return ended

    # -- views ----------------------------------------------------------------------------------

    async def list_jobs(self, state: str | None, limit: int) -> list[dict[str, Any]]:
        if state is not None and state not in {s.value for s in JobState}:
            raise ValueError(f"state must be one of {', '.join(s.value for s in JobState)}")
        jobs = await self.db(self.journal.list_jobs, JobState(state) if state else None, limit)
        return [_job_json(job) for job in jobs]

    async def job_detail(self, job_id: str) -> dict[str, Any] | None:
        job = await self.db(self.journal.get_job, job_id)
        if job is None:
            return None
        out = _job_json(job)
        out["partition_results"] = [
            {k: v for k, v in asdict(p).items() if k != "job_id"}
            for p in await self.db(self.journal.partitions, job_id)
        ]
        return out

    def controller_state(self) -> dict[str, Any]:
        """The dispatch policy: its name, mode, interval (s) and bootstrap counters; under pi
        also the controller's settings, terms and estimates."""
        policy = self.policy
        state: dict[str, Any] = {
            "policy": self.policy_name,
            "mode": policy.mode.value,
            "interval_s": policy.interval_s(),
            "bootstraps": policy.bootstraps,
            "rebootstraps": policy.rebootstraps,
        }
        if isinstance(policy, PIController):
            state["settings"] = policy.settings.model_dump()
            state["terms"] = policy.terms._asdict()
            state["estimates"] = asdict(policy.estimates)
        return state

    def retune(self, changes: dict[str, Any], manual: float | EllipsisType | None) -> None:
        """Apply new gains/limits (bumpless) and, unless ``manual`` is ``...``, set or clear a
        manual interval. PolicyConflictError under a baseline policy: it has neither."""
        if not isinstance(self.policy, PIController):
            retuning = bool(changes) or isinstance(manual, EllipsisType)
            rule = "can be retuned" if retuning else "has a manual mode"
            raise PolicyConflictError(self.policy_name, f"only the pi policy {rule}")
        if changes:
            self.policy.retune(**changes)
        if not isinstance(manual, EllipsisType):
            self.policy.set_manual(manual)
            changes = {**changes, "manual_interval_s": manual}
        log.info("controller retuned: %s", changes)

    async def status(self) -> dict[str, Any]:
        p = self.pipeline
        counts = await self.db(self.journal.counts)
        return {
            "ready": self.ready,
            "draining": self.draining,
            "workload": self.workload.name,
            "controller": self.controller_state(),
            "queues": {
                "backlog": p.backlog,
                "synthesizing": p.synthesizing,
                "ready": p.ready,
                "proving": p.gpu_busy,
                "verifying": p.verifying,
            },
            "memory": {
                "budget_bytes": p.budget_bytes,
                "inflight_bytes": p.inflight_bytes,
                "partition_bytes": self.partition_bytes,
                "caps": asdict(self.caps),
            },
            "pool": _pool_json(p.pool),
            "synthesis": {
                # Where synthesis runs: the GPU path's setting; the CPU workloads use threads.
                "executor": getattr(self.workload, "executor", "threads"),
                # How the ntt workload computes it (numba or numpy); None for other workloads.
                "kernel": getattr(self.workload, "kernel", None),
                "restarts": p.synthesis_restarts,
            },
            "gpus": [
                {
                    "gpu": g,
                    "workers": p.workers_on(g),
                    "busy_ratio": round(p.busy_ratio(g), 4),
                    "busy_seconds": round(p.busy_seconds(g), 3),
                }
                for g in p.gpus
            ],
            "jobs": {state.value: n for state, n in counts.items()},
        }


def _or_workload_says(setting: int | None, workload: Workload, name: str, default: int) -> int:
    """A setting left unset defers to what the workload says (its attribute ``name``), and
    to ``default`` where it says nothing."""
    if setting is not None:
        return setting
    return int(getattr(workload, name, default))


def _estimates_key(
    settings: Settings,
    workload: Workload,
    partition_bytes: int,
    threads_per_synthesis: int,
    workers: int,
) -> str:
    """What this start's estimates are valid for (``pacer.estimates.estimates_key``): the
    workload and what sets its durations (field, size, kernel, executor, threads, workers),
    the GPU model and the cores."""
    field = getattr(workload, "field", None)
    params: dict[str, object] = {
        "field": getattr(field, "name", None),
        "log_n": getattr(workload, "log_n", None),
        "kernel": getattr(workload, "kernel", None),
        "partition_bytes": partition_bytes,
        "threads_per_synthesis": threads_per_synthesis,
        "executor": settings.synthesis.executor,
        "gpu_workers": workers,
    }
    return estimates_key(
        workload=settings.workload,
        params={name: value for name, value in params.items() if value is not None},
        gpu_model=str(getattr(workload, "gpu_model", "none")),
        cores=settings.synthesis.cores,
    )


def _estimates(saved: dict[str, float | None] | None) -> Estimates | None:
    """The controller's estimates as the journal saved them (a restart starts warm)."""
    if not saved or saved.get("gpu_service_s") is None or saved.get("synthesis_s") is None:
        return None
    return Estimates(
        saved["gpu_service_s"], saved["synthesis_s"], saved.get("synthesis_sd_s") or 0.0
    )


def _pool_json(pool: Any) -> dict[str, Any]:
    if pool is None:
        return {"total_bytes": 0, "in_use_bytes": 0}
    return {name: getattr(pool, name) for name in POOL_FIELDS}


def _job_json(job: JobRecord) -> dict[str, Any]:
    out = asdict(job)
    out["state"] = job.state.value
    return out


class _Signals:
    """First SIGTERM/SIGINT: set ``stop``. Second: exit at once. Restores the old handlers."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.received: list[int] = []

    def _handle(self, signum: int) -> None:
        self.received.append(signum)
        if len(self.received) > 1:
            log.warning("second signal: exiting now")
            os._exit(1)
        log.info("signal %s: draining", signal.Signals(signum).name)
        self.stop.set()

    @contextlib.contextmanager
    def installed(self) -> Iterator[_Signals]:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._handle, signum)
        try:
            yield self
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)


async def serve(settings: Settings) -> int:
    """Run the service until SIGTERM/SIGINT; the process exit status."""
    service = Service(settings)
    with _Signals().installed() as signals:
        await service.start()
        await signals.stop.wait()
        await service.shutdown()
    return 0


def run(settings: Settings) -> int:
    """``pacer serve``: the service on uvloop."""
    import uvloop

    return uvloop.run(serve(settings))
