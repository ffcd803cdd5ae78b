"""Engine sessions' metrics, each series labelled by ``engine`` (the name its hello gave).

The state of each session (controller terms, partitions and bytes in flight, counts of events
and errors) is read when Prometheus scrapes; idle gaps and decision latencies are observed as
they happen, and an engine's series leave with its session.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pacer.control.policy import Mode
from pacer.metrics.collectors import IDLE_GAP_BUCKETS

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)


@dataclass(frozen=True)
class EngineView:
    """One session at a scrape: its ``snapshot`` (`EngineSession.snapshot`), whether it is
    connected, and its refused events by error code."""

    snapshot: Mapping[str, Any]
    connected: bool
    errors: Mapping[str, int]


GAUGES = (
    (
        "inflight_partitions",
        "inflight",
        "Partitions holding the engine's memory, advised and "
        "not yet reported included (partitions)",
    ),
    ("inflight_bytes", "inflight_bytes", "Bytes the engine's partitions in flight hold (bytes)"),
    ("memory_budget_bytes", "memory_budget_bytes", "The memory budget the engine declared (bytes)"),
    ("ready_partitions", "ready", "Partitions synthesized, waiting for a GPU (partitions)"),
    (
        "synthesizing_partitions",
        "synthesizing",
        "Partitions dispatched, not yet synthesized (partitions)",
    ),
    ("gpu_busy_workers", "gpu_busy", "GPU workers proving a partition (workers)"),
    ("gpu_workers", "gpu_workers", "GPU workers up (workers)"),
    ("backlog_partitions", "backlog", "Partitions the engine has not dispatched (partitions)"),
    (
        "controller_interval_seconds",
        "interval_s",
        "Mean interval between dispatches the engine's controller paces at (s)",
    ),
    ("controller_error", "error", "Setpoint less projected ready depth (partitions)"),
    ("controller_projected_ready", "projected_ready", "Projected ready depth (partitions)"),
)


class EngineMetrics(Collector):
    """Scrape-time series of every session ``views()`` gives, and the histograms observed as
    events arrive (`gap`, `latency`), on ``registry``."""

    def __init__(self, registry: CollectorRegistry, views: Callable[[], list[EngineView]]):
        self._views = views
        self.gap = Histogram(
            "pacer_engine_gpu_idle_gap_seconds",
            "Time a GPU worker of an engine waited between the end of one partition and the "
            "start of the next, from the engine's events as pacer received them (s)",
            ["engine"],
            buckets=IDLE_GAP_BUCKETS,
            registry=registry,
        )
        self.latency = Histogram(
            "pacer_engine_decision_latency_seconds",
            "Time from an engine's event arriving to the decision it prompted being written to "
            "the engine's socket (s)",
            ["engine"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.ended = Counter(
            "pacer_engine_sessions_ended_total",
            "Engine sessions ended, by reason: bye, grace_expired, send_queue_overflow, "
            "replaced, stopping",
            ["reason"],
            registry=registry,
        )
        registry.register(self)

    def forget(self, engine: str) -> None:
        """Drop an engine's histogram series (its session ended)."""
        for histogram in (self.gap, self.latency):
            with contextlib.suppress(KeyError):
                histogram.remove(engine)

    def collect(self) -> Iterator[Metric]:
        views = self._views()
        sessions = GaugeMetricFamily(
            "pacer_engine_sessions",
            "Engine sessions by state: connected, or waiting for their engine to resume (sessions)",
            labels=["state"],
        )
        connected = sum(v.connected for v in views)
        sessions.add_metric(["connected"], connected)
        sessions.add_metric(["waiting"], len(views) - connected)
        yield sessions
        for suffix, key, text in GAUGES:
            family = GaugeMetricFamily(f"pacer_engine_{suffix}", text, labels=["engine"])
            for view in views:
                family.add_metric([view.snapshot["engine"]], float(view.snapshot[key]))
            yield family
        mode = GaugeMetricFamily(
            "pacer_engine_controller_mode",
            "The engine's controller mode: 1 for the one it is in",
            labels=["engine", "mode"],
        )
        events = CounterMetricFamily(
            "pacer_engine_events", "Events taken in (events)", labels=["engine"]
        )
        busy = CounterMetricFamily(
            "pacer_engine_gpu_busy_seconds",
            "GPU seconds the engine measured, summed over its workers (s)",
            labels=["engine"],
        )
        errors = CounterMetricFamily(
            "pacer_engine_errors",
            "Events refused, by error code (events)",
            labels=["engine", "code"],
        )
        for view in views:
            snap = view.snapshot
            for m in Mode:
                mode.add_metric([snap["engine"], m.value], float(snap["mode"] == m.value))
            events.add_metric([snap["engine"]], snap["events"])
            busy.add_metric([snap["engine"]], snap["gpu_busy_s"])
            for code, count in sorted(view.errors.items()):
                errors.add_metric([snap["engine"], code], count)
        yield from (mode, events, busy, errors)
