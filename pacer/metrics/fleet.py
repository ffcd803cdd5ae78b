"""The metrics of a host of a fleet (a PostgreSQL journal): its claims, leases and renewals,
read at scrape time from what the service's fleet counts, and the time claims take. A host
without a fleet exports none of them: absent, not zero."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CLAIM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


@dataclass
class FleetCounts:
    """What a host of a fleet did with the fleet's queue since it started: the counters the
    metrics export (`pacer.service.fleet_host.Fleet` counts them)."""

    claims: int = 0
    claimed_partitions: int = 0
    empty_claims: int = 0
    reclaimed_partitions: int = 0
    renewal_failures: int = 0
    lost_leases: int = 0
    unproved_partitions: int = 0  # not given to a GPU: their lease had lapsed or was lost
    unknown_given_back: int = 0  # leased by a claim whose answer was lost, given back


class FleetView(Protocol):
    """What the metrics read of a host's part in its fleet (`pacer.service.fleet_host.Fleet`)."""

    @property
    def host(self) -> str: ...

    @property
    def counts(self) -> FleetCounts: ...

    @property
    def held(self) -> Mapping[int, object]: ...

    def leased_partitions(self) -> int: ...

    def since_renewal_s(self) -> float: ...

    def refused_results(self) -> int: ...


def claim_histogram(registry: CollectorRegistry) -> Callable[[float], None]:
    """``pacer_fleet_claim_seconds`` on ``registry``; what observes a claim's time (s)."""
    histogram = Histogram(
        "pacer_fleet_claim_seconds",
        "Time one claim of partitions from the fleet's queue took, round trip (s)",
        buckets=CLAIM_BUCKETS,
        registry=registry,
    )
    return histogram.observe


class FleetMetrics(Collector):
    """A host's fleet metrics, read from ``fleet`` when Prometheus scrapes."""

    def __init__(self, fleet: FleetView) -> None:
        self._fleet = fleet

    def collect(self) -> Iterator[Metric]:
        fleet = self._fleet
        info = GaugeMetricFamily(
            "pacer_fleet_host_info",
            "1, labelled with this pacer's name in the fleet (PACER_JOURNAL__HOST)",
            labels=["host"],
        )
        info.add_metric([fleet.host], 1.0)
        yield info
        counts = fleet.counts
        for name, doc, value in [
            ("pacer_fleet_claims", "Claims of partitions from the fleet's queue",
             counts.claims),
            ("pacer_fleet_claimed_partitions", "Partitions claimed from the fleet's queue",
             counts.claimed_partitions),
            ("pacer_fleet_empty_claims", "Claims that found no partition free",
             counts.empty_claims),
            ("pacer_fleet_reclaimed_partitions",
             "Partitions claimed from another host's lease that had lapsed",
             counts.reclaimed_partitions),
            ("pacer_fleet_renewal_failures", "Renewals of this host's leases that failed",
             counts.renewal_failures),
            ("pacer_fleet_lost_leases",
             "Leases this host lost with partitions it had not started (reclaimed after they "
             "lapsed, or their job ended on another host)", counts.lost_leases),
            ("pacer_fleet_unproved_partitions",
             "Partitions not given to a GPU: their lease had lapsed (past its deadline) or was "
             "lost", counts.unproved_partitions),
            ("pacer_fleet_unknown_given_back_partitions",
             "Partitions this host gave back that a claim whose answer was lost had leased to "
             "it", counts.unknown_given_back),
            ("pacer_fleet_refused_results",
             "Proved results the journal did not store: their leases were no longer this "
             "host's", fleet.refused_results()),
        ]:  # fmt: skip
            yield CounterMetricFamily(name, doc, value=value)
        gauges: list[tuple[str, str, float]] = [
            ("pacer_fleet_leases", "Leases (batches of partitions) this host holds",
             len(fleet.held)),
            ("pacer_fleet_leased_partitions", "Partitions of the leases this host holds",
             fleet.leased_partitions()),
            ("pacer_fleet_since_renewal_seconds",
             "Time since this host's leases were last renewed (s)", fleet.since_renewal_s()),
        ]  # fmt: skip
        for name, doc, gauge in gauges:
            yield GaugeMetricFamily(name, doc, value=gauge)
