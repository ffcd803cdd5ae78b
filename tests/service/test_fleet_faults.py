"""Faults that once stopped a whole fleet or made it prove twice, with real `pacer serve`
processes on a PostgreSQL server of the test's own: a host frozen (SIGSTOP) past its lease
holds no other host up, and once resumed proves at most its partitions in flight again and
stores none of them; the server restarted, for a moment or for longer than a lease, or a
failover to a standby, with one host out of reach a little longer still, makes no host prove a
partition twice.

How many partitions were proved twice is what the hosts proved (their
``pacer_partitions_total{outcome="completed"}``) less the jobs' partitions."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit

import pytest

from pacer.client import ApiError
from tests.conftest import running_postgres
from tests.pgjournal.database import sql
from tests.postgres_server import PostgresServer
from tests.servers import READY_S, ServerFactory, ServerProcess
from tests.service.test_fleet import (
    all_completed,
    check_every_job_completed_once,
    fleet_env,
    metric,
)
from tests.waits import wait_until

pytestmark = pytest.mark.slow

LEASE_S = 3.0
MAX_GAP_S = 12.0  # the longest the fleet may go without a commit while one host is frozen
# Synthesis slowed so that the jobs outlast the fault (the noop workload is instant otherwise).
SLOWER = {"faults": [{"call": "synthesis", "kind": "slow", "seconds": 0.05}]}
WORK_S = 120.0  # the most a run may take to complete every job
RESTART_LEASE_S = 12.0  # shorter than the longer restart
# How much longer than the restart one host stays out of reach (as a pool slow to connect
# again): past its lease, within the lease's grace after the start.
LATE_S = 6.0


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of the test's own, which it may stop and start again."""
    with running_postgres() as server:
        yield server


def hosts_on(
    factory: ServerFactory, url: str, names: list[str], lease_s: float
) -> list[ServerProcess]:
    """Hosts of the fleet at ``url``, each with a lease of ``lease_s``, started and ready."""
    hosts = [factory(**{**fleet_env(url, name), "PACER_JOURNAL__LEASE_S": str(lease_s)})
             for name in names]  # fmt: skip
    for host in hosts:
        host.launch()
    for host in hosts:
        host.client.wait_ready(READY_S)
    return hosts


def done_in(url: str) -> int:
    [(done,)] = sql(url, "SELECT coalesce(sum(partitions_done), 0) FROM jobs")
    return int(str(done))


def fleet_state(url: str) -> str:
    """What the database holds of the fleet's work, for a failure's message: each job's state
    and counts, and each run of the queue with its holder and the seconds its lease has left."""
    jobs = sql(url, "SELECT j.id, j.state, j.partitions, j.partitions_done,"
                    " (SELECT count(*) FROM partitions p WHERE p.job_id = j.id)"
                    " FROM jobs j ORDER BY j.seq")  # fmt: skip
    runs = sql(url, "SELECT job_id, start, stop, claimed_by,"
                    " round(extract(epoch FROM lease_until - now())::numeric, 1),"
                    " round(extract(epoch FROM now() - renewed_at)::numeric, 1), given_back"
                    " FROM batches ORDER BY job_id, start")  # fmt: skip
    return (
        f"jobs (id, state, partitions, done, results): {jobs}; runs (job, start, stop, "
        f"holder, lease left s, since renewed s, given back): {runs}"
    )


def until_completed(url: str) -> None:
    """Wait for every job to complete; on a timeout, the message holds `fleet_state`."""
    try:
        wait_until(lambda: all_completed(url), "every job to complete", timeout_s=WORK_S)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {fleet_state(url)}") from exc


def proved_twice(url: str, hosts: list[ServerProcess]) -> int:
    [(partitions,)] = sql(url, "SELECT sum(partitions) FROM jobs")
    proved = sum(metric(h, "pacer_partitions_total", outcome="completed") for h in hosts)
    return int(proved) - int(str(partitions))


def reclaims_logged(hosts: list[ServerProcess]) -> list[str]:
    """The lines of the hosts' logs that tell of a lease reclaimed or lost, for a failure's
    message: which host took which run from whom, and when."""
    told = ("reclaimed", "lease lost", "gave back")
    return [line for host in hosts for line in host.log.splitlines()
            if any(word in line for word in told)]  # fmt: skip


def completed_with_none_proved_twice(
    url: str, hosts: list[ServerProcess], accepted: list[str]
) -> None:
    """Every job completes once, no partition was proved twice nor a lease taken from a host,
    and each host stops cleanly."""
    until_completed(url)
    assert proved_twice(url, hosts) == 0
    reclaimed = sum(metric(h, "pacer_fleet_reclaimed_partitions_total") for h in hosts)
    assert reclaimed == 0, reclaims_logged(hosts)
    for host in hosts:
        host.signal(signal.SIGTERM)
    assert [host.wait(30) for host in hosts] == [0, 0, 0]
    check_every_job_completed_once(url, accepted, hosts)


@dataclass
class Watch:
    """Samples, on a thread of its own, the fleet's committed partitions and whether the
    ``healthy`` hosts are ready, until stopped: the longest gap between two commits seen while
    work remained, each refusal of readiness (the host and its answer), and what failed the
    sampling itself (``errors``: the watch saw nothing after it)."""

    url: str
    healthy: list[ServerProcess]
    gaps: list[float] = field(default_factory=list)
    unready: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Watch:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        try:
            self._sample()
        except Exception as exc:  # the test's assertions name it
            self.errors.append(repr(exc))

    def _sample(self) -> None:
        last, since = done_in(self.url), time.monotonic()
        while not self._stop.wait(0.2):
            now, done = time.monotonic(), done_in(self.url)
            if done != last or all_completed(self.url):
                self.gaps.append(now - since)
                last, since = done, now
            for host in self.healthy:
                try:
                    host.client.request("GET", "/readyz")
                except ApiError as exc:
                    self.unready.append(f"{host.env['PACER_JOURNAL__HOST']}: {exc}")
        self.gaps.append(time.monotonic() - since)


def test_a_host_frozen_past_its_lease_stops_no_one_and_stores_nothing_it_lost(
    own_postgres: PostgresServer, server_factory: ServerFactory
) -> None:
    url = own_postgres.create_database()
    a, b, frozen = hosts_on(server_factory, url, ["a", "b", "frozen"], LEASE_S)
    accepted = [a.client.submit(300, params=SLOWER) for _ in range(6)]
    wait_until(lambda: done_in(url) > 100, "some results")
    wait_until(lambda: sql(url, "SELECT count(*) FROM batches WHERE claimed_by = 'frozen'")[0][0],
               "the host to be frozen to hold leases")  # fmt: skip
    with Watch(url, [a, b]) as watch:
        frozen.signal(signal.SIGSTOP)
        # What it holds: the most it can prove once resumed (its partitions in flight).
        [(held,)] = sql(url, "SELECT coalesce(sum(stop - start), 0) FROM batches"
                             " WHERE claimed_by = 'frozen'")  # fmt: skip
        wait_until(lambda: sql(url, "SELECT count(*) FROM batches WHERE claimed_by = 'frozen'"
                                    " AND lease_until > now()")[0][0] == 0,
                   "its leases to lapse")  # fmt: skip
        wait_until(lambda: sql(url, "SELECT count(*) FROM batches WHERE claimed_by = 'frozen'")
                   [0][0] == 0, "the others to take its leases")  # fmt: skip
        frozen.signal(signal.SIGCONT)
        until_completed(url)
    assert watch.errors == []
    assert max(watch.gaps) <= MAX_GAP_S, watch.gaps
    assert watch.unready == []

    twice = proved_twice(url, [a, b, frozen])
    refused = [metric(h, "pacer_fleet_refused_results_total") for h in (a, b, frozen)]
    unproved = metric(frozen, "pacer_fleet_unproved_partitions_total")
    # The frozen host proved twice at most what it had in flight, and each partition proved
    # twice is a result refused under a lease lost. (On a loaded machine a healthy host may
    # renew late too and lose a lease of its own: what it proved twice is its own, and its
    # refusals say so.) That every job completed once, with no result stored twice, is
    # checked below.
    assert refused[2] <= int(str(held)), (refused, held, unproved)
    assert twice == sum(refused), (twice, refused, held, unproved)
    for host in (a, b, frozen):
        host.signal(signal.SIGTERM)
    assert [host.wait(30) for host in (a, b, frozen)] == [0, 0, 0]
    check_every_job_completed_once(url, accepted, [a, b, frozen])


@pytest.mark.parametrize("down_s", [3.0, 30.0], ids=["3s", "30s"])
def test_a_server_restart_makes_no_host_prove_a_partition_twice(
    own_postgres: PostgresServer, server_factory: ServerFactory, down_s: float
) -> None:
    url = own_postgres.create_database()
    hosts = hosts_on(server_factory, url, ["a", "b", "late"], RESTART_LEASE_S)
    late = hosts[2]
    # Small jobs: each job's partitions never handed out are soon gone, so that a lapsed lease
    # is what a claim takes first.
    accepted = [hosts[0].client.submit(45, params=SLOWER) for _ in range(40)]
    wait_until(lambda: done_in(url) > 100, "some results")
    own_postgres.halt()
    late.signal(signal.SIGSTOP)  # cut off from the database a little longer than the others
    time.sleep(down_s)  # the fault itself: the server down this long
    own_postgres.resume()
    time.sleep(LATE_S)
    late.signal(signal.SIGCONT)
    completed_with_none_proved_twice(url, hosts, accepted)


FAILOVER_DOWN_S = 8.0  # no primary: more than half a lease, so every host sees the gap


def test_a_failover_to_a_standby_makes_no_host_prove_a_partition_twice(
    own_postgres: PostgresServer, server_factory: ServerFactory
) -> None:
    primary_url = own_postgres.create_database()
    database = urlsplit(primary_url).path.lstrip("/")
    standby = own_postgres.standby()
    try:
        # Either server, whichever takes writes: the hosts follow the failover by themselves.
        both = ",".join(quote(str(s.root)) for s in (own_postgres, standby))
        ports = f"{own_postgres.port},{standby.port}"
        url = (f"postgresql://{own_postgres.user}@/{database}?host={both}&port={ports}"
               "&target_session_attrs=read-write")  # fmt: skip
        hosts = hosts_on(server_factory, url, ["fo-a", "fo-b", "fo-late"], RESTART_LEASE_S)
        late = hosts[2]
        accepted = [hosts[0].client.submit(45, params=SLOWER) for _ in range(40)]
        wait_until(lambda: done_in(url) > 100, "some results")
        late.signal(signal.SIGSTOP)  # out of reach a little longer than the others
        own_postgres.halt()  # a clean stop: the standby has every committed write
        time.sleep(FAILOVER_DOWN_S)  # the fault itself: no primary this long
        standby.promote()
        time.sleep(LATE_S)
        late.signal(signal.SIGCONT)
        # The standby's server started before the fault: only the fleet's own clock of when
        # it last reached the server tells its hosts' leases to wait.
        completed_with_none_proved_twice(url, hosts, accepted)
    finally:
        standby.stop()
