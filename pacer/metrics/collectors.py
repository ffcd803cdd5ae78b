"""Prometheus metrics, on a registry the caller provides (nothing registers at import).

State (controller terms, queue depths, memory, pool, busy ratios) is read when Prometheus
scrapes; durations are observed into histograms once per partition as they happen.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Callable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from pacer import __version__
from pacer.control.controller import PIController
from pacer.control.policy import Mode
from pacer.journal import JobRecord
from pacer.metrics.health import HealthCollector
from pacer.metrics.pool_view import NoPool, PoolView
from pacer.pipeline import Outcome, Pipeline
from pacer.pipeline.attempts import CALLS, Call
from pacer.runtime.supervision import ProgressWatchdog, Supervisor

IDLE_GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
PHASE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
SYNTHESIS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 45, 60, 120, 300)
JOB_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200,
               86400)  # fmt: skip


class _StateCollector(Collector):
    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline

    def collect(self) -> Iterator[Metric]:
        # The workload's pool appears only once the service has allocated it.
        pool: PoolView = self._pipeline.pool or NoPool()
        policy = self._pipeline.controller  # the one dispatching (start may rebuild it)
        if isinstance(policy, PIController):
            # PI terms only under pi: a baseline has none, and a series that is absent cannot
            # be mistaken for a value (nor fire an alert on one).
            t = policy.terms
            gauges = [
                ("pacer_controller_error", "Setpoint less the Smith-predicted ready depth, the "
                 "error the integral takes in (partitions)", t.error),
                ("pacer_controller_p_term", "Proportional term kp*(setpoint - projected depth), "
                 "refilled over a lead time above the feed-forward (partitions)", t.p_term),
                ("pacer_controller_i_term", "Integral term ki*integral(error) per lead time "
                 "(partitions)", t.i_term),
                ("pacer_controller_ff_term",
                 "Feed-forward dispatch interval, GPU time / workers (s)", t.ff_interval_s),
                ("pacer_controller_setpoint", "Effective setpoint of the projected ready depth, "
                 "raised where the synthesis slots barely outpace the GPUs, with the pipeline "
                 "of GPU workers just lost while it is held", t.setpoint),
                ("pacer_controller_projected_ready", "Smith-predicted ready depth one lead time "
                 "ahead: the projection and its filtered mismatch (partitions)",
                 t.projected_ready),
                ("pacer_controller_lead_seconds", "Synthesis lead time the projection looks "
                 "ahead: the synthesis estimate, or more while the oldest syntheses outrun it "
                 "or a slowdown is seen (s)", t.lead_s),
                ("pacer_controller_live_floor_seconds", "Live floor on the lead time: the age "
                 "of one of the oldest syntheses running, less the margin by which such "
                 "syntheses outran the synthesis estimate lately, never below 0; 0 while too "
                 "few run (s)",
                 t.floor_s),
                ("pacer_controller_slowdown", "How many times slower synthesis runs than the "
                 "synthesis estimate says, from the syntheses that failed to finish in time; 1 "
                 "while none is seen", t.slowdown),
                ("pacer_controller_held_workers", "GPU workers lost, or stuck on one partition, "
                 "whose share of the pipeline is kept for them (partitions wait ready) until "
                 "they are back or the hold of lost_gpu_hold_leads lead times ends", t.held),
                ("pacer_controller_synthesis_hung", "Syntheses counted as hung, left out of "
                 "those in synthesis: running for ten synthesis estimates, or set apart from "
                 "the rest by a gap in their ages", t.hung),
            ]  # fmt: skip
            for name, doc, value in gauges:
                yield GaugeMetricFamily(name, doc, value=value)
            cap = t.rate_cap_per_s
            if math.isfinite(cap):  # absent until a synthesis time is known
                yield GaugeMetricFamily(
                    "pacer_controller_synthesis_cap",
                    "Synthesis-throughput cap on dispatch: the synthesis concurrency and the "
                    "ends that bunch up, over the synthesis threads' own time a synthesis "
                    "(partitions/s)",
                    value=cap,
                )
                yield GaugeMetricFamily(
                    "pacer_controller_synthesis_queue",
                    "Partitions allowed to wait in front of the synthesis processes, for the "
                    "hand-off and the ends that bunch up",
                    value=policy.synthesis_queue(),
                )
            handoff = policy.synthesis_handoff_s
            if handoff is not None:  # absent until the pipeline measured a synthesis
                yield GaugeMetricFamily(
                    "pacer_controller_synthesis_handoff_seconds",
                    "Hand-off between the service and its synthesis threads: the trip out to a "
                    "free thread and back to the event loop, as measured (s)",
                    value=handoff,
                )
            supply = policy.synthesis_supply_per_s
            if supply > 0:  # absent until a synthesis time is known
                yield GaugeMetricFamily(
                    "pacer_controller_synthesis_supply",
                    "What synthesis can supply: partitions a second the synthesis slots "
                    "finish with every one busy, without the wait for one (partitions/s)",
                    value=supply,
                )
        yield GaugeMetricFamily(
            "pacer_controller_interval_seconds",
            "Interval between dispatches after clamps; 0: whenever there is room (s)",
            value=policy.interval_s(),
        )
        # A gauge per mode, 1 for the current one; its label is "mode", not the metric's name
        # as a state set would have it (pacer_controller_mode{pacer_controller_mode=...}).
        mode = GaugeMetricFamily(
            "pacer_controller_mode",
            "What the dispatch policy is doing: 1 for the current mode, 0 for the others",
            labels=["mode"],
        )
        for m in Mode:
            mode.add_metric([m.value], float(policy.mode is m))
        yield mode
        p = self._pipeline
        for name, doc, value in [
            ("pacer_backlog_partitions", "Accepted partitions not yet dispatched", p.backlog),
            ("pacer_synthesis_inflight", "Partitions in synthesis", p.synthesizing),
            ("pacer_verify_inflight", "Partitions verifying or waiting for a thread to verify "
             "them", p.verifying),
            ("pacer_ready_partitions", "Synthesized partitions waiting for a GPU", p.ready),
            ("pacer_memory_budget_bytes", "Memory budget in effect for in-flight partitions: as "
             "configured, or clamped at start to what the host has (bytes)",
             p.budget_bytes),
            ("pacer_memory_inflight_bytes", "Memory held by in-flight partitions (bytes)",
             p.inflight_bytes),
            ("pacer_memory_abandoned_bytes",
             "Memory still held by calls abandoned past their time limit, part of the "
             "in-flight memory until they return (bytes)", p.abandoned_bytes),
            ("pacer_abandoned_threads",
             "Threads still running a call abandoned past its time limit", p.abandoned_threads),
            ("pacer_gpu_workers_live",
             "Proving workers with a live thread, not stuck in an abandoned call",
             p.live_workers),
            ("pacer_pinned_pool_total_bytes", "Pinned host memory in the pool (bytes)",
             pool.total_bytes),
            ("pacer_pinned_pool_in_use_bytes", "Pinned pool memory checked out (bytes)",
             pool.in_use_bytes),
        ]:  # fmt: skip
            yield GaugeMetricFamily(name, doc, value=value)
        for name, doc, value in [
            ("pacer_controller_bootstraps", "Cold bootstraps", policy.bootstraps),
            ("pacer_controller_rebootstraps", "Re-bootstraps after a true drain",
             policy.rebootstraps),
            ("pacer_pinned_pool_waits", "Checkouts that waited for a slot", pool.waits),
            ("pacer_pinned_pool_fallbacks", "Checkouts served from pageable memory",
             pool.fallbacks),
            ("pacer_synthesis_worker_restarts",
             "Times the synthesis processes were replaced after one died", p.synthesis_restarts),
            ("pacer_verifications_skipped", "Verifications PACER_VERIFY_EVERY asked for, "
             "skipped as the verify threads were behind", p.verifications_skipped),
        ]:  # fmt: skip
            yield CounterMetricFamily(name, doc, value=value)
        yield GaugeMetricFamily(
            "pacer_synthesis_busy_ratio",
            "Fraction of the last 60 s the synthesis workers spent in a synthesis (where "
            "synthesis runs in processes: the processes' busy share)",
            value=p.calls.synthesis_busy_ratio(),
        )
        yield CounterMetricFamily(
            "pacer_synthesis_busy_seconds",
            "Synthesis worker-seconds spent in a synthesis (s)",
            value=p.calls.synthesis_busy_seconds(),
        )
        busy = GaugeMetricFamily(
            "pacer_gpu_busy_ratio",
            "Fraction of the last 60 s with a partition on the GPU",
            labels=["gpu"],
        )
        busy_s = CounterMetricFamily(
            "pacer_gpu_busy_seconds", "Time with a partition on the GPU (s)", labels=["gpu"]
        )
        for gpu in p.gpus:
            busy.add_metric([str(gpu)], p.busy_ratio(gpu))
            busy_s.add_metric([str(gpu)], p.busy_seconds(gpu))
        yield busy
        yield busy_s


class Metrics:
    """All of pacer's metrics on ``registry``, with the process (CPU, memory, open files),
    platform (Python) and garbage-collector collectors a default registry has; pass it to the
    pipeline as its observer. The dispatch policy's state is read from
    ``pipeline.controller`` at scrape time.

    ``policy_name`` labels ``pacer_controller_policy_info``, so that dashboards and comparisons
    can tell which dispatch policy a series was recorded under."""

    def __init__(
        self,
        registry: CollectorRegistry,
        pipeline: Pipeline,
        policy_name: str,
    ) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry
        self._provers = pipeline.provers.progress
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        registry.register(_StateCollector(pipeline))
        self.idle_gaps = Histogram(
            "pacer_gpu_idle_gap_seconds",
            "Time a GPU had no partition: from one's end to the next one's start on it (s)",
            ["gpu"],
            buckets=IDLE_GAP_BUCKETS,
            registry=registry,
        )
        self.phases = Histogram(
            "pacer_gpu_phase_seconds",
            "Time of each proving phase (s)",
            ["gpu", "phase"],
            buckets=PHASE_BUCKETS,
            registry=registry,
        )
        self.synthesis = Histogram(
            "pacer_synthesis_seconds",
            "Synthesis duration of a partition, dispatch to ready (s)",
            buckets=SYNTHESIS_BUCKETS,
            registry=registry,
        )
        self.synthesis_wait = Histogram(
            "pacer_synthesis_wait_seconds",
            "Part of a partition's synthesis spent waiting for a synthesis worker (s)",
            buckets=SYNTHESIS_BUCKETS,
            registry=registry,
        )
        self.partitions = Counter(
            "pacer_partitions",
            "Partition attempts that left the pipeline: completed, or failed (each failed "
            "attempt of a retried partition counts)",
            ["outcome"],
            registry=registry,
        )
        self.jobs = Counter("pacer_jobs", "Jobs that ended", ["outcome"], registry=registry)
        self.job_seconds = Histogram(
            "pacer_job_duration_seconds",
            "Time from a job's submission to its end, by how it ended (s)",
            ["outcome"],
            buckets=JOB_BUCKETS,
            registry=registry,
        )
        self.hung_calls = Counter(
            "pacer_hung_calls",
            "Workload calls abandoned past their time limit, by call",
            ["call"],
            registry=registry,
        )
        self.retries = Counter(
            "pacer_partition_retries",
            "Failed partition attempts queued again (after a backoff)",
            registry=registry,
        )
        for call in CALLS:
            self.hung_calls.labels(call)
        for outcome in ("completed", "failed"):
            self.partitions.labels(outcome)
        for outcome in ("completed", "failed", "cancelled"):
            self.jobs.labels(outcome)
            self.job_seconds.labels(outcome)
        for gpu in pipeline.gpus:
            self.idle_gaps.labels(str(gpu))
        build = GaugeMetricFamily("pacer_build_info", "pacer build", labels=["version", "python"])
        build.add_metric([__version__, platform.python_version()], 1.0)
        registry.register(_Constant(build))
        info = GaugeMetricFamily(
            "pacer_controller_policy_info",
            "The dispatch policy running (PACER_CONTROLLER__POLICY)",
            labels=["policy"],
        )
        info.add_metric([policy_name], 1.0)
        registry.register(_Constant(info))

    def watch_health(
        self,
        supervisor: Supervisor,
        watchdog: ProgressWatchdog,
        unready_reasons: Callable[[], list[str]],
    ) -> None:
        """Export task failures, progress and readiness, read at scrape time."""
        self.registry.register(
            HealthCollector(supervisor, watchdog, unready_reasons, self._provers)
        )

    # Observer
    def synthesized(self, seconds: float, wait_s: float) -> None:
        self.synthesis.observe(seconds)
        self.synthesis_wait.observe(wait_s)

    def proved(self, gpu: int, gpu_s: float, phases_s: dict[str, float]) -> None:
        for phase, seconds in phases_s.items():
            self.phases.labels(str(gpu), phase).observe(seconds)

    def idle_gap(self, gpu: int, seconds: float) -> None:
        self.idle_gaps.labels(str(gpu)).observe(seconds)

    def finished(self, outcome: Outcome) -> None:
        self.partitions.labels("failed" if outcome.error else "completed").inc()

    def hung_call(self, call: Call) -> None:
        self.hung_calls.labels(call).inc()

    def job_ended(self, job: JobRecord) -> None:
        """``job`` ended (completed, failed or cancelled): counted, and its time from
        submission to the end (journal times) observed."""
        outcome = job.state.value
        self.jobs.labels(outcome).inc()
        self.job_seconds.labels(outcome).observe(max(0.0, job.updated_at - job.created_at))


class _Constant(Collector):
    def __init__(self, metric: Metric) -> None:
        self._metric = metric

    def collect(self) -> Iterator[Metric]:
        yield self._metric
