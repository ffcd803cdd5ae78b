"""A service as a host of a fleet, in process, on a real PostgreSQL: jobs go to the shared
queue and come back as claims; a lease lost to another host (or to a cancel there) leaves the
backlog at the next renewal; a restart gives back what the previous run held; one pacer per
host name; readiness says when the leases were not renewed; the fleet's view in the API and the
metrics."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from pacer.api.openapi import document
from pacer.journal import Claim, HostInUseError, JobState, LeaseToken
from pacer.journal.health import JournalUnavailable
from pacer.pgjournal import PgJournal
from pacer.ranges import IndexRanges
from pacer.server import Server
from pacer.service.lifecycle import Service
from tests.conftest import FakeClock
from tests.journal.stores import proved
from tests.json_schema import problems
from tests.pgjournal.database import expire, sql
from tests.servers import call, fake_host, refusing_port, settings_for, until_done
from tests.waits import until

pytestmark = pytest.mark.asyncio
HOST = "gpu-a"


def fleet_server(
    tmp_path: Path, url: str, host: str = HOST, clock: FakeClock | None = None, **env: str
) -> Server:
    """A host of the fleet at ``url``, with the noop workload, not started."""
    roomy = fake_host(tmp_path / "host", total=2**41, available=2**40)
    settings = settings_for(tmp_path, PACER_WORKLOAD="noop", PACER_JOURNAL__URL=url,
                            PACER_JOURNAL__HOST=host, **env)  # fmt: skip
    if clock is None:
        return Server(Service.build(settings, CollectorRegistry(), host_files=roomy))
    return Server(Service.build(settings, CollectorRegistry(), clock, host_files=roomy))


@pytest_asyncio.fixture
async def host(tmp_path: Path, postgres_url: str) -> AsyncIterator[Server]:
    server = fleet_server(tmp_path, postgres_url)
    await server.start()
    yield server
    if not server.service.draining:
        await server.shutdown()


@pytest.fixture
def other(postgres_url: str) -> Iterator[PgJournal]:
    """Another host of the fleet, as its journal calls."""
    with PgJournal.connect(postgres_url, host="gpu-b") as journal:
        yield journal


async def held_claims(server: Server, partitions: int) -> str:
    """Hold dispatch, submit a job and claim it all: its partitions wait in the backlog."""
    fleet = server.service.fleet
    assert fleet is not None
    server.service.pipeline.hold(True)
    job = await server.service.submit(partitions, {}, 0)
    assert server.service.pipeline.backlog == 0  # accepted into the fleet's queue, not this backlog

    # The claim loop may have begun a claim before the hold, which takes some of them first
    # (a claim made while it reads their job finishes that one rather than claiming anew):
    # claim again until the backlog holds every one. One lease or two hold them.
    async def backlog() -> int:
        await fleet.claim(partitions - server.service.pipeline.backlog)
        return server.service.pipeline.backlog

    await until(backlog, f"the backlog to hold all {partitions} partitions",
                done=lambda n: n == partitions)  # fmt: skip
    return job.id


async def head_taken(host: Server, other: PgJournal, url: str) -> tuple[str, Claim]:
    """A job of 10 partitions claimed here, its leases lapsed, and the first two taken by
    ``other``: the job's id and that claim."""
    job_id = await held_claims(host, 10)
    expire(url, HOST)
    [head] = other.claim("gpu-b", 2)
    assert (head.pending, head.reclaimed_from) == (IndexRanges([(0, 2)]), HOST)
    return job_id, head


def head_proved(other: PgJournal, job_id: str, head: Claim) -> None:
    """``other`` proves and commits the two partitions of its claim ``head``."""
    lease = LeaseToken(head.batch, head.token)
    other.complete_partitions([replace(proved(job_id, i), lease=lease) for i in (0, 1)])


def check_schema(answer: Any, path: str) -> None:
    doc = document()
    schema = doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]
    assert problems(answer, schema["schema"], doc) == []


async def test_a_host_proves_what_it_accepts_through_the_fleets_queue_and_shows_it(
    host: Server,
) -> None:
    job_id = await held_claims(host, 5)
    status, detail = await call(host, "GET", f"/v1/jobs/{job_id}")
    assert status == 200
    check_schema(detail, "/v1/jobs/{id}")
    [holder] = detail["holders"]
    assert (holder["host"], holder["partitions"]) == (HOST, 5)
    # One lease, or two where the claim loop had begun a claim before the hold (held_claims):
    # either way, in order, they hold the five partitions once each.
    assert holder["leases"] in (1, 2)
    assert len(holder["runs"]) == holder["leases"]
    assert IndexRanges((start, stop) for start, stop in holder["runs"]).runs() == [(0, 5)]
    assert 0 < holder["expires_in_s"] <= 30
    assert detail["state"] == "running"  # marked at its first claim
    host.service.pipeline.hold(False)
    assert (await until_done(host, job_id))["state"] == "completed"
    status, answer = await call(host, "GET", "/v1/status")
    check_schema(answer, "/v1/status")
    fleet = answer["fleet"]
    assert (fleet["host"], fleet["lease_s"], fleet["pending_partitions"]) == (HOST, 30.0, 0)
    assert fleet["claims"] >= 1
    assert fleet["claimed_partitions"] == 5
    registry = host.service.registry
    assert registry.get_sample_value("pacer_fleet_host_info", {"host": HOST}) == 1.0
    assert registry.get_sample_value("pacer_fleet_claimed_partitions_total") == 5.0
    # Every claim is timed; the claim loop may have asked again since the status was read.
    timed = registry.get_sample_value("pacer_fleet_claim_seconds_count")
    assert timed is not None
    assert timed >= fleet["claims"]


async def test_a_lease_another_host_reclaimed_leaves_the_backlog_at_the_renewal(
    host: Server, other: PgJournal, postgres_url: str
) -> None:
    fleet = host.service.fleet
    assert fleet is not None
    job_id = await held_claims(host, 10)
    leases = len(fleet.held)
    expire(postgres_url, HOST)  # as if this host had not renewed for a lease
    claims = other.claim("gpu-b", 10)
    assert {(claim.job_id, claim.reclaimed_from) for claim in claims} == {(job_id, HOST)}
    assert sum(len(claim.pending) for claim in claims) == 10
    await fleet.renew()
    assert host.service.pipeline.backlog == 0
    assert fleet.held == {}
    assert fleet.counts.lost_leases == leases  # each with partitions not started
    assert host.service.registry.get_sample_value("pacer_fleet_lost_leases_total") == leases


async def test_a_run_claimed_again_after_it_was_lost_proves_each_partition_once(
    host: Server, other: PgJournal, postgres_url: str
) -> None:
    """A host's lease lapses (it was frozen, or late to renew), another host takes the run's
    head, and this one claims the rest again (the same run, a new token) while results of it
    wait for a commit: those are committed under the new lease, not refused, and neither they
    nor the head are queued again here."""
    service = host.service
    fleet = service.fleet
    assert fleet is not None
    job_id = await held_claims(host, 10)
    await service.commits.stop()  # results wait until this test commits them
    leases = {batch: (held.token, held.pending) for batch, held in fleet.held.items()}
    for index in (3, 4):  # proved under the lease, not yet committed
        [(batch, token)] = [(b, t) for b, (t, runs) in leases.items() if index in runs]
        service.journal_access.pending.append(
            replace(proved(job_id, index), lease=LeaseToken(batch, token)))  # fmt: skip
    service.pipeline.discard(job_id, IndexRanges([(3, 5)]))
    expire(postgres_url, HOST)
    [head] = other.claim("gpu-b", 2)
    assert (head.pending, head.reclaimed_from) == (IndexRanges([(0, 2)]), HOST)
    assert await fleet.claim(10) == 8
    assert service.pipeline.waiting(job_id) == 6  # 2 and 5-9; not 3 and 4, nor the head
    await service.commits.flush()
    assert fleet.refused_results() == 0
    head_proved(other, job_id, head)
    service.pipeline.hold(False)
    await until(lambda: len(service.journal_access.pending), "the rest proved",
                done=lambda n: n == 6)  # fmt: skip
    await service.commits.flush()
    assert (await until_done(host, job_id))["state"] == "completed"
    registry = service.registry
    assert registry.get_sample_value("pacer_partitions_total", {"outcome": "completed"}) == 6
    assert fleet.refused_results() == 0


async def test_a_renewal_sent_before_a_run_is_claimed_again_does_not_drop_the_new_lease(
    host: Server, other: PgJournal, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A renewal runs on its own thread while a claim takes back the rest of a run this host
    lost (the same batch, a new token). The renewal's answer, read before that claim, lacks
    the run: it must not drop the lease claimed after it was sent, or the run would stay this
    host's in the database with no one here to prove it."""
    service = host.service
    fleet = service.fleet
    assert fleet is not None
    job_id, head = await head_taken(host, other, postgres_url)
    answered, go_on = threading.Event(), threading.Event()
    renew = fleet.journal.renew

    def renew_then_wait(*args: Any) -> Any:
        kept = renew(*args)  # the database answers now, before the claim below
        answered.set()
        go_on.wait(10)
        return kept

    monkeypatch.setattr(fleet.journal, "renew", renew_then_wait)
    renewal = asyncio.create_task(fleet.renew())
    await until(answered.is_set, "the renewal's answer")
    assert await fleet.claim(10) == 8  # the rest of the run, under a new token
    go_on.set()
    assert await renewal
    monkeypatch.setattr(fleet.journal, "renew", renew)
    assert sorted(i for held in fleet.held.values() for i in held.pending) == list(range(2, 10))
    assert service.pipeline.waiting(job_id) == 8
    await fleet.renew()  # the next renewal keeps it too
    assert service.pipeline.waiting(job_id) == 8
    service.pipeline.hold(False)
    head_proved(other, job_id, head)
    assert (await until_done(host, job_id))["state"] == "completed"
    assert fleet.refused_results() == 0


async def test_a_renewal_that_loses_a_jobs_leases_while_a_claim_reads_jobs_keeps_its_new_one(
    host: Server, other: PgJournal, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim answers with the rest of a run this host lost (its job known here) and a run of
    a job new here, which the claim reads next. Meanwhile a renewal drops the lost lease, the
    last this host knew of the first job. The claim must still hold both runs: a lease the
    database gave this host and the host forgot is renewed by no one and lapses a lease later,
    its partitions proved only then."""
    service = host.service
    fleet = service.fleet
    assert fleet is not None
    first, head = await head_taken(host, other, postgres_url)
    second = await service.submit(4, {}, 0)
    reading, go_on = threading.Event(), threading.Event()
    get_job = fleet.journal.get_job

    def read_then_wait(job_id: str) -> Any:
        if job_id == second.id:
            reading.set()
            go_on.wait(10)
        return get_job(job_id)

    monkeypatch.setattr(fleet.journal, "get_job", read_then_wait)
    claim = asyncio.create_task(fleet.claim(20))
    await until(reading.is_set, "the claim to read the new job")
    assert await fleet.renew()  # the lost lease leaves: no lease of the first job is held yet
    go_on.set()
    assert await claim == 8 + 4
    monkeypatch.setattr(fleet.journal, "get_job", get_job)
    assert service.pipeline.waiting(first) == 8
    assert service.pipeline.waiting(second.id) == 4
    await fleet.renew()
    leased = sql(postgres_url, "SELECT token FROM batches WHERE claimed_by = %s", HOST)
    assert sorted(int(str(token)) for (token,) in leased) == sorted(
        held.token for held in fleet.held.values())  # fmt: skip
    head_proved(other, first, head)
    service.pipeline.hold(False)
    for job_id in (first, second.id):
        assert (await until_done(host, job_id))["state"] == "completed"
    assert fleet.counts.reclaimed_partitions == 0


async def test_a_lease_this_host_does_not_hold_is_not_renewed_by_it(
    host: Server, postgres_url: str
) -> None:
    """A lease of this host's name in the database that the host does not know of (it lost
    track of it) is not renewed: it lapses, and another host can take its partitions."""
    fleet = host.service.fleet
    assert fleet is not None
    job_id = await held_claims(host, 4)
    batch = next(iter(fleet.held))
    forgotten = fleet.leases.drop(batch)
    sql(postgres_url, "UPDATE batches SET lease_until = now() + interval '5 s' WHERE id = %s",
        batch)  # fmt: skip
    await fleet.renew()
    [(until_s,)] = sql(postgres_url, "SELECT extract(epoch FROM lease_until - now())"
                                     " FROM batches WHERE id = %s", batch)  # fmt: skip
    assert float(str(until_s)) <= 5, "a lease no one here holds was renewed"
    assert forgotten.job_id == job_id


async def test_leases_of_a_claim_whose_answer_was_lost_are_given_back_before_the_next(
    host: Server, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database commits a claim, then the connection breaks before its answer arrives (a
    server's restart): the host holds leases it does not know, which no renewal extends. The
    next claim gives them back first, so that their partitions are proved now, here or on
    another host, rather than once they lapse."""
    service = host.service
    fleet = service.fleet
    assert fleet is not None
    service.pipeline.hold(True)
    claim = fleet.journal.claim

    def claim_answer_lost(*args: Any) -> Any:
        claim(*args)
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(fleet.journal, "claim", claim_answer_lost)
    job = await service.submit(6, {}, 0)
    with pytest.raises(JournalUnavailable):
        await fleet.claim(6)
    [(leased,)] = sql(postgres_url, "SELECT count(*) FROM batches WHERE claimed_by = %s", HOST)
    assert (bool(leased), fleet.held) == (True, {})  # leased, and not known here
    monkeypatch.setattr(fleet.journal, "claim", claim)
    assert await fleet.claim(6) == 6  # given back, then claimed again at once
    tokens = sql(postgres_url, "SELECT token FROM batches WHERE claimed_by = %s", HOST)
    assert sorted(int(str(token)) for (token,) in tokens) == sorted(
        held.token for held in fleet.held.values())  # fmt: skip
    assert fleet.counts.reclaimed_partitions == 0
    given = service.registry.get_sample_value("pacer_fleet_unknown_given_back_partitions_total")
    # The whole job, which the lost claim had leased; more where the claim loop's own claim,
    # begun before the hold and waiting for the test's, lost its answer too and leased some again.
    assert given is not None
    assert given >= 6.0
    service.pipeline.hold(False)
    assert (await until_done(host, job.id))["state"] == "completed"


async def test_upkeep_completes_a_job_whose_last_count_was_lost_then_packs_it(
    host: Server, other: PgJournal, postgres_url: str
) -> None:
    host.service.pipeline.hold(True)  # whatever this host claims, it proves none of it
    job = other.add_job(3, None, {})
    (done,) = other.complete_partitions([proved(job.id, i) for i in range(3)])
    _, page = await call(host, "GET", f"/v1/jobs/{job.id}/partitions")
    # The count of the last commit lost (the server crashed, the other host died after).
    sql(postgres_url, "UPDATE jobs SET state = 'running', partitions_done = 2,"
                      " result_digest = NULL WHERE id = %s", job.id)  # fmt: skip
    await host.service.commits.upkeep()
    _, detail = await call(host, "GET", f"/v1/jobs/{job.id}")
    assert (detail["state"], detail["result_digest"]) == ("completed", done.result_digest)
    assert sql(postgres_url, "SELECT count(*) FROM partitions WHERE job_id = %s", job.id) == [
        (0,)]  # packed by upkeep  # fmt: skip
    assert await call(host, "GET", f"/v1/jobs/{job.id}/partitions") == (200, page)


async def test_a_cancel_on_another_host_reaches_this_one_at_its_renewal(
    host: Server, other: PgJournal
) -> None:
    fleet = host.service.fleet
    assert fleet is not None
    job_id = await held_claims(host, 6)
    cancelled = other.cancel(job_id)
    assert cancelled is not None
    assert cancelled.state is JobState.CANCELLED
    await fleet.renew()
    assert host.service.pipeline.backlog == 0
    assert fleet.held == {}


async def test_a_restart_gives_back_what_the_previous_run_held(
    tmp_path: Path, postgres_url: str, other: PgJournal, caplog: pytest.LogCaptureFixture
) -> None:
    job = other.add_job(8, "noop", {})
    with PgJournal.connect(postgres_url, host=HOST) as previous:  # the run that died
        assert sum(len(c.pending) for c in previous.claim(HOST, 8)) == 8
    server = fleet_server(tmp_path, postgres_url)
    caplog.set_level("INFO", "pacer.service")
    await server.start()
    try:
        assert f"gave back 8 partitions a previous run of {HOST} held" in caplog.messages
        # Long before its 30 s lease would have lapsed:
        assert (await until_done(server, job.id))["state"] == "completed"
        assert server.service.fleet is not None
        assert server.service.fleet.counts.reclaimed_partitions == 0
    finally:
        await server.shutdown()


async def test_a_second_pacer_of_the_same_name_is_refused(
    host: Server, tmp_path: Path, postgres_url: str
) -> None:
    (tmp_path / "second").mkdir()
    second = fleet_server(tmp_path / "second", postgres_url)
    with pytest.raises(HostInUseError, match=f"host name '{HOST}' is in use .* by pacer {HOST}"):
        await second.start()
    await second.shutdown()
    job = await host.service.submit(3, {}, 0)  # the first goes on
    assert (await until_done(host, job.id))["state"] == "completed"


async def test_leases_not_renewed_for_longer_than_a_lease_make_the_host_unready(
    tmp_path: Path, postgres_url: str
) -> None:
    clock = FakeClock(1000.0)
    # The clock jumps past a lease at once: the journal calls in flight then (the listener's
    # wait, always) have run that long on it, so the limit on a call is set past the jump.
    server = fleet_server(tmp_path, postgres_url, clock=clock, PACER_JOURNAL__LEASE_S="30",
                          PACER_JOURNAL__STALL_S="3600")  # fmt: skip
    await server.start()
    try:
        assert server.service.fleet is not None
        assert server.service.unready_reasons() == []
        clock.advance(31.0)
        [reason] = server.service.unready_reasons()
        assert reason.startswith("fleet: leases not renewed for 31 s, more than the lease (30 s)")
        await server.service.fleet.renew()
        assert server.service.unready_reasons() == []
    finally:
        await server.shutdown()


@pytest.mark.slow
async def test_a_database_out_of_reach_holds_the_start_with_the_reason(tmp_path: Path) -> None:
    with refusing_port() as port:
        url = f"postgresql://pacer:secret@127.0.0.1:{port}/pacer?sslpassword=secret"
        server = fleet_server(tmp_path, url, PACER_JOURNAL__TIMEOUT_S="1")
        starting = asyncio.ensure_future(server.start())
        try:
            reasons = await until(server.service.unready_reasons, "the start to say why",
                                  done=lambda reasons: len(reasons) > 1)  # fmt: skip
            assert reasons[0] == "starting"
            assert reasons[1].startswith("journal failing for ")
            assert "journal postgresql://pacer:***@127.0.0.1:" in reasons[1]
            assert "secret" not in " ".join(reasons)
            assert not starting.done()  # waiting, not given up
        finally:
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            await server.shutdown()
