"""A fleet of real `pacer serve` processes sharing one PostgreSQL journal: jobs accepted by one
host are proved by all, every job completes exactly once with the results one host alone
gives; a host SIGKILLed mid-run, again and again, loses its partitions to the others within
its lease; the database stopped mid-run makes the hosts say so in /readyz, loses no accepted
job, and proving resumes when it is back.

The workload is the noop one behind the fault workload, whose synthesis each job slows a
little (``SLOW``), so that a job lasts long enough to be shared and to be killed in."""

from __future__ import annotations

import hashlib
import random
import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pacer.client import ApiError
from pacer.journal import result_digest
from pacer.workload import job_seed
from tests.conftest import running_postgres
from tests.pgjournal.database import sql
from tests.postgres_server import PostgresServer
from tests.servers import READY_S, ServerFactory, ServerProcess, readyz_refuses
from tests.waits import wait_until

pytestmark = pytest.mark.slow

LEASE_S = 2.0
IDLE_POLL_MAX_S = 1.0  # pacer.service.fleet_host.IDLE_POLL_MAX_S: how late an idle host looks again
# What a loaded machine adds to a reclaim: the kill seen, a claim's round trip, this test's polls.
RECLAIM_SLACK_S = 3.0
SLOW = {"faults": [{"call": "synthesis", "kind": "slow", "seconds": 0.01}]}


def fleet_env(url: str, host: str) -> dict[str, str]:
    return {
        "PACER_WORKLOAD": "tests.faults:make",
        "PACER_JOURNAL__URL": url,
        "PACER_JOURNAL__HOST": host,
        "PACER_JOURNAL__LEASE_S": str(LEASE_S),
        "PACER_JOURNAL__CLAIM_MAX": "4",
        "PACER_JOURNAL__TIMEOUT_S": "1",
        "PACER_SYNTHESIS__CORES": "2",
    }


def start_fleet(factory: ServerFactory, url: str, names: list[str]) -> dict[str, ServerProcess]:
    hosts = {name: factory(**fleet_env(url, name)) for name in names}
    for host in hosts.values():
        host.launch()
    for host in hosts.values():
        host.client.wait_ready(READY_S)
    return hosts


def expected_digest(job_id: str, partitions: int) -> str:
    """The job's result as one host alone, or this process, computes it (noop proofs)."""
    seed = job_seed(job_id, SLOW)
    digests = [hashlib.sha256(f"{seed}:{i}".encode()).hexdigest() for i in range(partitions)]
    return result_digest(digests)


def metric(server: ServerProcess, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(server.metrics_text()):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    raise AssertionError(f"{name}{labels} not exported")


def journal_jobs(url: str) -> dict[str, tuple[Any, ...]]:
    """id → (state, partitions, partitions_done, result_digest)."""
    rows = sql(url, "SELECT id, state, partitions, partitions_done, result_digest FROM jobs")
    return {str(row[0]): tuple(row[1:]) for row in rows}


def all_completed(url: str) -> bool:
    return all(job[0] == "completed" for job in journal_jobs(url).values())


def check_every_job_completed_once(
    url: str, accepted: list[str], hosts: list[ServerProcess]
) -> None:
    """Every accepted job is in the journal, completed once (one result a partition, one
    completion across the hosts' logs), with the digest one host alone computes."""
    jobs = journal_jobs(url)
    assert set(accepted) <= set(jobs), "an accepted job was lost"
    # Rows and packs (hosts' upkeep packs completed jobs) alike, through their view.
    results = sql(url, "SELECT job_id, count(*), count(DISTINCT idx) FROM partition_rows"
                       " WHERE state = 'completed' GROUP BY job_id")  # fmt: skip
    rows = {str(job): (int(str(n)), int(str(distinct))) for job, n, distinct in results}
    completions: Counter[str] = Counter()
    for host in hosts:
        completions.update(re.findall(r"job completed: \w+ \[job=(\w+)\]", host.log))
        # A job whose last commit stored its results but lost its count (the host killed
        # between the commit's two transactions) is completed by another host's sweep.
        completions.update(re.findall(r"job completed by the sweep: .* \[job=(\w+)\]", host.log))
    for job_id, (state, partitions, done, digest) in jobs.items():
        assert (state, done) == ("completed", partitions), job_id
        assert rows[job_id] == (partitions, partitions), f"{job_id}: a partition twice"
        assert completions[job_id] <= 1, f"{job_id} completed twice"
        assert digest == expected_digest(job_id, partitions), job_id
    assert sum(completions.values()) >= len(jobs) - 1  # but one killed between commit and log


def leases_of(url: str, host: str) -> int:
    [(count,)] = sql(url, "SELECT count(*) FROM batches WHERE claimed_by = %s", host)
    return int(str(count))


def test_jobs_accepted_by_one_host_are_proved_by_all_three_exactly_once(
    postgres_url: str, server_factory: ServerFactory
) -> None:
    hosts = start_fleet(server_factory, postgres_url, ["a", "b", "c"])
    accepted = [hosts["a"].client.submit(40, params=SLOW) for _ in range(9)]
    viewer = hosts["c"].client  # any host shows the fleet's view
    wait_until(lambda: all(viewer.job(j)["state"] == "completed" for j in accepted),
               "every job to complete", timeout_s=120)  # fmt: skip
    shares = {
        name: metric(host, "pacer_partitions_total", outcome="completed")
        for name, host in hosts.items()
    }
    assert all(share > 0 for share in shares.values()), shares  # each host did a share
    assert sum(shares.values()) == 9 * 40  # and nothing was proved twice
    for name, host in hosts.items():
        assert metric(host, "pacer_fleet_host_info", host=name) == 1.0
        assert metric(host, "pacer_fleet_claimed_partitions_total") == shares[name]
    status = viewer.status()["fleet"]
    assert (status["host"], status["pending_partitions"]) == ("c", 0)
    for host in hosts.values():
        host.signal(signal.SIGTERM)
    assert [host.wait(30) for host in hosts.values()] == [0, 0, 0]
    check_every_job_completed_once(postgres_url, accepted, list(hosts.values()))


def test_a_host_killed_mid_run_again_and_again_loses_its_partitions_within_its_lease(
    postgres_url: str, server_factory: ServerFactory
) -> None:
    rng = random.Random("fleet-kill")
    hosts = start_fleet(server_factory, postgres_url, ["a", "b", "victim"])
    everyone = list(hosts.values())
    accepted: list[str] = []
    reclaimed_after: list[float] = []
    for _ in range(5):
        for _ in range(3):
            accepted.append(hosts[rng.choice("ab")].client.submit(60, params=SLOW))
        victim = hosts["victim"]
        wait_until(lambda: leases_of(postgres_url, "victim") > 0, "the victim to claim")
        time.sleep(rng.uniform(0, 0.3))
        victim.signal(signal.SIGKILL)
        victim.wait(10)
        killed = time.monotonic()
        held = leases_of(postgres_url, "victim")
        wait_until(lambda: leases_of(postgres_url, "victim") == 0, "its leases to be taken")
        if held > 0:  # the kill left leases: how long the others took to take them
            reclaimed_after.append(time.monotonic() - killed)
        hosts["victim"] = server_factory(**fleet_env(postgres_url, "victim")).start()
        everyone.append(hosts["victim"])
    assert reclaimed_after, "no kill left the victim holding leases"
    assert max(reclaimed_after) < LEASE_S + IDLE_POLL_MAX_S + RECLAIM_SLACK_S, reclaimed_after
    wait_until(lambda: all_completed(postgres_url), "every job to complete", timeout_s=120)
    reclaimed = sum(metric(hosts[n], "pacer_fleet_reclaimed_partitions_total") for n in "ab")
    assert reclaimed > 0
    for host in hosts.values():
        host.signal(signal.SIGTERM)
    assert [host.wait(30) for host in hosts.values()] == [0, 0, 0]
    check_every_job_completed_once(postgres_url, accepted, everyone)


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of the test's own, which it stops and starts again."""
    with running_postgres() as server:
        yield server


def test_the_database_out_of_reach_is_a_fault_the_fleet_rides_out(
    own_postgres: PostgresServer, server_factory: ServerFactory
) -> None:
    url = own_postgres.create_database()
    hosts = start_fleet(server_factory, url, ["a", "b"])
    accepted = [hosts["a"].client.submit(60, params=SLOW) for _ in range(6)]
    wait_until(lambda: sum(job[2] for job in journal_jobs(url).values()) > 0, "some results")
    own_postgres.halt()
    down = time.monotonic()
    clients = [host.client for host in hosts.values()]
    wait_until(lambda: all(readyz_refuses(c, "journal") for c in clients),
               "readiness to name the journal")  # fmt: skip
    with pytest.raises(ApiError) as refused:
        hosts["b"].client.submit(5, params=SLOW)
    assert refused.value.reason.startswith("503 journal failing for ")
    # What was claimed is proved meanwhile: its results wait for the journal.
    wait_until(lambda: sum(metric(h, "pacer_journal_uncommitted_results") for h in hosts.values()),
               "results waiting for the journal")  # fmt: skip
    time.sleep(max(0.0, LEASE_S - (time.monotonic() - down)))  # down longer than a lease
    for host in hosts.values():
        assert readyz_refuses(host.client, "leases not renewed")
    own_postgres.resume()
    for host in hosts.values():
        host.client.wait_ready(READY_S)
    accepted.append(hosts["b"].client.submit(5, params=SLOW))
    wait_until(lambda: all_completed(url), "every job to complete", timeout_s=120)
    for host in hosts.values():
        host.signal(signal.SIGTERM)
    assert [host.wait(30) for host in hosts.values()] == [0, 0]
    check_every_job_completed_once(url, accepted, list(hosts.values()))
