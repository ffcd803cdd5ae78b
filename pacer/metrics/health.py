"""The service's health and its journal's as Prometheus metrics, read at scrape time: the
long-lived tasks' failures, progress and stalls, readiness, and the journal's writes."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pacer.journal.health import JournalCalls, JournalHealth
from pacer.runtime.supervision import ProgressWatchdog, Supervisor


class HealthCollector(Collector):
    """The tasks' failures, the time since progress, the stalls and readiness."""

    def __init__(
        self,
        supervisor: Supervisor,
        watchdog: ProgressWatchdog,
        unready_reasons: Callable[[], list[str]],
        provers: ProgressWatchdog,
    ) -> None:
        self._supervisor = supervisor
        self._watchdog = watchdog
        self._unready_reasons = unready_reasons
        self._provers = provers

    def collect(self) -> Iterator[Metric]:
        failures = CounterMetricFamily(
            "pacer_task_failures",
            "Failures of a long-lived task or proving thread (restarted by the service)",
            labels=["task"],
        )
        for task, count in sorted(self._supervisor.failures().items()):
            failures.add_metric([task], count)
        yield failures
        yield GaugeMetricFamily(
            "pacer_last_progress_seconds",
            "Time since a partition was last synthesized or proved or a result committed (s)",
            value=self._watchdog.since_progress_s(),
        )
        yield GaugeMetricFamily(
            "pacer_stalled",
            "1 while work has waited PACER_HEALTH__STALL_S with no progress, else 0",
            value=float(self._watchdog.stalled()),
        )
        yield GaugeMetricFamily(
            "pacer_gpu_stalled_seconds",
            "How long partitions have waited for or sat on the GPU workers with no prove "
            "returning (s); 0 while one returns within the prove limit or none wait",
            value=self._provers.stalled_s(),
        )
        yield GaugeMetricFamily(
            "pacer_ready",
            "1 while /readyz answers 200, else 0 (/readyz and /v1/status say why)",
            value=float(not self._unready_reasons()),
        )


class JournalMetrics(Collector):
    """The journal's health, read at scrape time from ``health`` and ``calls`` (the calls
    running on its threads); ``uncommitted`` counts the proved results that wait for it."""

    def __init__(
        self, health: JournalHealth, calls: JournalCalls, uncommitted: Callable[[], int]
    ) -> None:
        self._health = health
        self._calls = calls
        self._uncommitted = uncommitted

    def collect(self) -> Iterator[Metric]:
        health = self._health
        yield GaugeMetricFamily(
            "pacer_journal_healthy",
            "1 while the journal takes writes, 0 while they fail",
            value=float(health.healthy),
        )
        yield GaugeMetricFamily(
            "pacer_journal_failing_seconds",
            "How long journal writes have been failing; 0 while they go through (s)",
            value=health.failing_s(),
        )
        yield GaugeMetricFamily(
            "pacer_journal_call_running_seconds",
            "How long the longest journal call running now has run; 0 while none runs (s); "
            "past PACER_JOURNAL__STALL_S the service is not ready",
            value=self._calls.longest_s(),
        )
        yield CounterMetricFamily(
            "pacer_journal_commit_failures",
            "Journal writes that failed (results, job failures, estimates, pruning, new jobs; "
            "a fleet's claims and renewals); each is retried but a new job's, which is refused "
            "(503)",
            value=health.failures,
        )
        yield GaugeMetricFamily(
            "pacer_journal_uncommitted_results",
            "Proved partitions whose results wait in memory for the journal",
            value=self._uncommitted(),
        )
