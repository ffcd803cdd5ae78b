"""A journal that fails under a running service: writes that raise, a full disk, a lock held by
another connection, the file deleted or replaced; and one service per journal file.

Against a real SQLite file and a real HTTP server. Accepted jobs must end completed (with the
result a fault-free run computes) or failed with their reason, never stuck; /readyz and
POST /v1/jobs answer 503 with the reason while the journal fails; nothing accepted is lost and no
result is recorded twice.
"""

from __future__ import annotations

import logging
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any, Protocol

import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from gpu.reference.digest import digest
from gpu.reference.ntt import compute_h
from gpu.reference.synthesis import synthesize
from pacer.client import ApiError
from pacer.journal import BUSY_TIMEOUT_S, JobRecord, Journal, PartitionResult, result_digest
from pacer.journal.health import Backoff
from pacer.server import Server
from pacer.service import commits
from pacer.service.lifecycle import Service
from pacer.workload import PartitionSpec, job_seed
from tests.servers import (
    ROOT,
    ServerFactory,
    call,
    readyz_refuses,
    settings_for,
    until_done,
)
from tests.service.test_process import completions_in, job_states
from tests.tiers import starts_something
from tests.waits import until, wait_until

LOG_N = 8  # tests.servers.FAST
PARTITIONS = 64  # their results take several pages: a journal that cannot grow refuses them
FAST_RETRY = Backoff(first_s=0.01, max_s=0.05, jitter=0.0)
FAST_JOURNAL = {
    "PACER_JOURNAL__COMMIT_INTERVAL_S": "0.01",
    "PACER_JOURNAL__BUSY_TIMEOUT_S": "0.05",
    "PACER_SHUTDOWN__DRAIN_S": "0.5",
}


class FaultyJournal(Journal):
    """The real journal, with two faults a test turns on and off: every write raises
    ``disk I/O error`` while ``failing`` is set; ``fill_disk`` caps the file at the pages it
    has (SQLite's own ``max_page_count``: a real SQLITE_FULL) until ``free_disk``."""

    def __init__(self, path: Path, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        super().__init__(path, busy_timeout_s=busy_timeout_s)
        self.failing = threading.Event()
        self._max_pages: int | None = None

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        # Every write opens a transaction here, so every write fails alike.
        if self.failing.is_set():
            raise sqlite3.OperationalError("disk I/O error")
        with super()._transaction() as db:
            yield db

    def fill_disk(self) -> None:
        self._max_pages = self._db.execute("PRAGMA max_page_count").fetchone()[0]
        pages = self._db.execute("PRAGMA page_count").fetchone()[0]
        self._db.execute(f"PRAGMA max_page_count = {pages}")

    def free_disk(self) -> None:
        assert self._max_pages is not None
        self._db.execute(f"PRAGMA max_page_count = {self._max_pages}")


class Fault(Protocol):
    """Something that makes the service's journal writes fail, until ``stop``."""

    reason: str  # what /readyz and the 503s say meanwhile

    async def start(self, svc: Server) -> None: ...

    async def stop(self, svc: Server) -> None: ...


def replace_with_a_copy(path: Path) -> None:
    """Put a consistent copy of the SQLite journal at ``path`` in place of the file (a new inode).
    The copy is taken with SQLite's backup, so it holds what the write-ahead log held too: a
    byte copy of the main file alone would hold a checkpoint's worth, which varies with timing."""
    copy = path.with_name("copy.sqlite")
    with closing(sqlite3.connect(path)) as source, closing(sqlite3.connect(copy)) as target:
        source.backup(target)
    copy.replace(path)


def faulty(svc: Server) -> FaultyJournal:
    assert isinstance(svc.service.journal, FaultyJournal)
    return svc.service.journal


class FailingWrites:
    reason = "disk I/O error"

    async def start(self, svc: Server) -> None:
        faulty(svc).failing.set()

    async def stop(self, svc: Server) -> None:
        faulty(svc).failing.clear()


class FullDisk:
    reason = "database or disk is full"

    async def start(self, svc: Server) -> None:
        await svc.service.db(faulty(svc).fill_disk)

    async def stop(self, svc: Server) -> None:
        await svc.service.db(faulty(svc).free_disk)


class OutsideLock:
    """Another connection holds the write lock (``BEGIN EXCLUSIVE``) past the busy timeout."""

    reason = "database is locked"

    def __init__(self) -> None:
        self._db: sqlite3.Connection | None = None

    async def start(self, svc: Server) -> None:
        self._db = sqlite3.connect(svc.service.settings.journal.path, isolation_level=None)
        self._db.execute("BEGIN EXCLUSIVE")

    async def stop(self, svc: Server) -> None:
        assert self._db is not None
        self._db.execute("ROLLBACK")
        self._db.close()


class MovedAway:
    """The file is moved away (the path names nothing), then put back."""

    reason = "was deleted or moved away"

    async def start(self, svc: Server) -> None:
        path = svc.service.settings.journal.path
        path.rename(path.with_name("moved-away.sqlite"))

    async def stop(self, svc: Server) -> None:
        path = svc.service.settings.journal.path
        path.with_name("moved-away.sqlite").rename(path)


FAULTS: dict[str, type[Fault]] = {
    "failing-writes": FailingWrites,
    "disk-full": FullDisk,
    "outside-lock": OutsideLock,
    "moved-away": MovedAway,
}


@pytest_asyncio.fixture
@starts_something
async def svc(tmp_path: Path) -> AsyncIterator[Server]:
    """A started service whose journal is a `FaultyJournal`, retrying fast."""
    server = Server(
        Service.build(
            settings_for(tmp_path, **FAST_JOURNAL), CollectorRegistry(), backoff=FAST_RETRY
        )
    )
    await server.service.open()
    await server.service.db(server.service.journal.close)
    faulty_journal = await server.service.db(
        FaultyJournal, server.service.settings.journal.path, 0.05
    )
    server.service.journal_access.journal = faulty_journal
    await server.start()
    yield server
    if not server.service.draining:
        await server.shutdown()


def expected_digest(job_id: str, partitions: int) -> str:
    """The job's result as a fault-free run computes it."""
    seed = job_seed(job_id, {})
    digests = []
    for index in range(partitions):
        a, b, c = synthesize(seed, index, LOG_N)
        digests.append(digest(compute_h(a, b, c)))
    return result_digest(digests)


async def until_readyz(svc: Server, says: str) -> None:
    """Wait until /readyz answers what ``says`` names: ``ready``, or a reason it gives with
    503."""

    def names(answer: tuple[int, Any]) -> bool:
        status, body = answer
        return (status, body.get("status")) == (200, says) or (
            status == 503 and says in body["error"]
        )

    await until(lambda: call(svc, "GET", "/readyz"), f"/readyz to say {says!r}", done=names,
                every_s=0.02)  # fmt: skip


async def assert_completed_exactly(svc: Server, job_id: str, partitions: int) -> None:
    job = await until_done(svc, job_id)
    assert job["state"] == "completed", job["error"]
    assert job["partitions_done"] == partitions
    assert [p["index"] for p in job["partition_results"]] == list(range(partitions))
    assert job["result_digest"] == expected_digest(job_id, partitions)


@pytest.mark.asyncio
@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS.keys())
async def test_jobs_accepted_before_a_fault_complete_once_it_clears(
    svc: Server, fault: type[Fault]
) -> None:
    value = svc.service.registry.get_sample_value
    svc.service.pipeline.hold(True)  # the job's results come only once the fault is on
    status, body = await call(svc, "POST", "/v1/jobs", {"partitions": PARTITIONS})
    assert status == 202
    injected = fault()
    await injected.start(svc)
    svc.service.pipeline.hold(False)

    await until_readyz(svc, injected.reason)
    status, refused = await call(svc, "POST", "/v1/jobs", {"partitions": 2})
    assert status == 503
    assert injected.reason in refused["error"]
    assert refused["error"].endswith("not accepting new jobs")
    assert value("pacer_journal_healthy") == 0
    assert (value("pacer_journal_commit_failures_total") or 0) > 0
    assert (value("pacer_journal_failing_seconds") or 0) > 0
    _, status_body = await call(svc, "GET", "/v1/status")
    assert status_body["journal"]["healthy"] is False
    assert injected.reason in status_body["journal"]["error"]
    # The work went on: every partition was proved, and what the journal has not taken waits
    # in memory.
    await until(
        lambda: svc.service.pipeline.idle and svc.service.pipeline.backlog == 0,
        "every partition proved",
    )
    _, meanwhile = await call(svc, "GET", f"/v1/jobs/{body['id']}")
    assert meanwhile["partitions_done"] + svc.service.uncommitted() == PARTITIONS

    await injected.stop(svc)
    await assert_completed_exactly(svc, body["id"], PARTITIONS)
    await until_readyz(svc, "ready")
    assert value("pacer_journal_healthy") == 1
    assert value("pacer_journal_failing_seconds") == 0
    assert value("pacer_journal_uncommitted_results") == 0
    assert value("pacer_jobs_total", {"outcome": "completed"}) == 1  # counted once
    status, after = await call(svc, "POST", "/v1/jobs", {"partitions": 3})
    assert status == 202
    await assert_completed_exactly(svc, after["id"], 3)


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_job_that_fails_during_a_fault_fails_once_it_clears(
    svc: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    synthesize = svc.service.workload.synthesize

    def out_of_memory_on_partition_2(spec: PartitionSpec) -> Any:
        if spec.index == 2:
            raise MemoryError("cannot allocate the partition's vectors")
        return synthesize(spec)

    monkeypatch.setattr(svc.service.workload, "synthesize", out_of_memory_on_partition_2)
    svc.service.pipeline.hold(True)
    _, body = await call(svc, "POST", "/v1/jobs", {"partitions": 4})
    faulty(svc).failing.set()
    svc.service.pipeline.hold(False)
    await until_readyz(svc, FailingWrites.reason)
    await until(lambda: svc.service.pipeline.idle, "the job's partitions to leave the pipeline")
    _, meanwhile = await call(svc, "GET", f"/v1/jobs/{body['id']}")
    assert meanwhile["state"] == "queued"  # nothing could be written yet
    faulty(svc).failing.clear()
    job = await until_done(svc, body["id"])
    assert job["state"] == "failed"
    assert (
        job["error"] == "partition 2 failed after 3 attempts: synthesis failed: "
        'MemoryError("cannot allocate the partition\'s vectors")'
    )
    assert svc.service.registry.get_sample_value("pacer_jobs_total", {"outcome": "failed"}) == 1
    await until_readyz(svc, "ready")


@pytest.mark.asyncio
async def test_a_write_that_fails_as_a_job_is_accepted_answers_503_and_keeps_nothing(
    svc: Server,
) -> None:
    faulty(svc).failing.set()
    status, refused = await call(svc, "POST", "/v1/jobs", {"partitions": 2})
    assert status == 503
    assert "disk I/O error: not accepting new jobs" in refused["error"]
    await until_readyz(svc, "disk I/O error")  # the probe keeps failing meanwhile
    assert svc.service.pipeline.backlog == 0
    faulty(svc).failing.clear()
    await until_readyz(svc, "ready")  # the probe says it recovered, with no job to commit
    assert await svc.service.db(svc.service.journal.list_jobs) == []


@pytest.mark.asyncio
async def test_a_write_failing_part_way_through_a_one_by_one_commit_keeps_what_is_left(
    svc: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    svc.service.pipeline.hold(True)  # the results below are the only ones
    job = await svc.service.submit(3, {}, 0)
    journal = faulty(svc)
    complete_partitions = journal.complete_partitions
    last_fails = threading.Event()

    def last_one_fails(items: Iterable[PartitionResult]) -> list[JobRecord]:
        items = list(items)
        if [(r.job_id, r.index) for r in items] == [(job.id, 2)] and last_fails.is_set():
            raise sqlite3.OperationalError("disk I/O error")
        return complete_partitions(items)

    monkeypatch.setattr(journal, "complete_partitions", last_one_fails)
    last_fails.set()
    # An unknown job's result makes the journal refuse the batch, so it commits one by one.
    svc.service.journal_access.pending += [PartitionResult(job.id, 0, "d0", 1.0, 0.1),
                     PartitionResult("no-such-job", 0, "x", 1.0, 0.1),
                     PartitionResult(job.id, 1, "d1", 1.0, 0.1),
                     PartitionResult(job.id, 2, "d2", 1.0, 0.1)]  # fmt: skip
    await until_readyz(svc, "disk I/O error")  # said once the partial commit has returned
    left = [(r.job_id, r.index) for r in svc.service.journal_access.pending]
    assert left == [(job.id, 2)]  # only what was left
    _, meanwhile = await call(svc, "GET", f"/v1/jobs/{job.id}")
    assert meanwhile["partitions_done"] == 2
    last_fails.clear()
    done = await until_done(svc, job.id)
    assert (done["state"], done["partitions_done"]) == ("completed", 3)
    assert done["result_digest"] == result_digest(["d0", "d1", "d2"])
    assert caplog.text.count("result dropped: unknown job 'no-such-job'") == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["deleted", "replaced"])
async def test_a_deleted_or_replaced_journal_file_refuses_work_and_is_written_no_more(
    svc: Server, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    svc.service.pipeline.hold(True)
    _, body = await call(svc, "POST", "/v1/jobs", {"partitions": PARTITIONS})
    path = svc.service.settings.journal.path
    if how == "deleted":
        path.unlink()
        problem = "deleted or moved away"
    else:
        replace_with_a_copy(path)
        problem = "replaced by another file"
    svc.service.pipeline.hold(False)
    await until_readyz(svc, f"journal file {path} was {problem}")
    status, refused = await call(svc, "POST", "/v1/jobs", {"partitions": 1})
    assert (status, problem in refused["error"]) == (503, True)
    assert "restart pacer" in refused["error"]
    await until(
        lambda: svc.service.pipeline.idle and svc.service.pipeline.backlog == 0,
        "every partition proved",
    )
    assert svc.service.uncommitted() == PARTITIONS  # all proved, none written to the lost file
    with caplog.at_level(logging.ERROR, "pacer.service"):
        assert await svc.shutdown()  # nothing in flight; commits retried for the drain budget
    assert f"exiting with {PARTITIONS} results and 0 failed attempts not committed" in caplog.text
    if how == "deleted":
        assert not path.exists()  # nothing wrote a new file there
    else:
        assert job_states(path) == {body["id"]: "queued"}  # the new file was left alone


@pytest.mark.slow
@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["deleted", "replaced"])
@pytest.mark.parametrize("key", [None, "retry-me"], ids=["plain", "idempotency-key"])
async def test_a_job_posted_right_after_the_journal_file_goes_is_refused_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, key: str | None
) -> None:
    server = Server(Service.build(settings_for(tmp_path), CollectorRegistry()))
    await server.start()
    try:

        async def no_commit_round() -> None:  # nothing else looks at the file meanwhile
            pass

        # A round that did nothing reports nothing either: its "the journal took the writes"
        # would clear the failure the POST below finds, before /readyz is asked.
        monkeypatch.setattr(server.service.commits, "flush", no_commit_round)
        monkeypatch.setattr(server.service.commits, "_journal_ok", lambda: None)
        server.service.pipeline.hold(True)  # nothing proved waits for a commit at the end
        path = server.service.settings.journal.path
        status, before = await call(server, "POST", "/v1/jobs", {"partitions": 1})
        assert status == 202
        if how == "deleted":
            path.unlink()
            problem = "deleted or moved away"
        else:
            replace_with_a_copy(path)
            problem = "replaced by another file"
        headers = None if key is None else {"Idempotency-Key": key}
        status, refused = await call(server, "POST", "/v1/jobs", {"partitions": 1},
                                     headers=headers)  # fmt: skip
        assert status == 503, refused
        assert f"journal file {path} was {problem}" in refused["error"]
        status, ready = await call(server, "GET", "/readyz")  # at once, not at a commit round
        assert (status, problem in ready["error"]) == (503, True)
    finally:
        monkeypatch.undo()
        await server.shutdown()
    if how == "replaced":
        assert job_states(path) == {before["id"]: "queued"}  # nothing more was written there


@pytest.mark.asyncio
async def test_dispatch_holds_while_too_many_results_wait_then_resumes(
    svc: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = 8
    monkeypatch.setattr(commits, "MAX_UNCOMMITTED", limit)
    svc.service.pipeline.hold(True)
    _, body = await call(svc, "POST", "/v1/jobs", {"partitions": PARTITIONS})
    faulty(svc).failing.set()
    svc.service.pipeline.hold(False)

    async def held() -> bool:
        _, status = await call(svc, "GET", "/v1/status")
        return bool(status["journal"]["dispatch_held"]) and svc.service.pipeline.idle

    await until(held, "dispatch to hold, nothing in flight")
    assert svc.service.pipeline.backlog > 0  # work waits, undispatched
    # Every commit fails, so the results waiting (those of a commit attempt included) only
    # grow, one at a time: dispatch held at the limit, and what was in flight then came on
    # top of it, no more.
    waiting = svc.service.uncommitted()
    assert limit <= waiting <= limit + svc.service.plan.caps.inflight_partitions
    faulty(svc).failing.clear()
    await assert_completed_exactly(svc, body["id"], PARTITIONS)
    _, status = await call(svc, "GET", "/v1/status")
    assert status["journal"]["dispatch_held"] is False


# -- real processes ----------------------------------------------------------------------------


def test_a_second_service_on_the_journal_refuses_to_start_naming_the_first(
    server_factory: ServerFactory,
) -> None:
    first = server_factory().start()
    assert first.proc is not None
    second = server_factory().launch()
    assert second.wait(60) == 2
    # The lock is taken before anything slow: the workload was not loaded (its backend, Numba
    # or NumPy, is logged as it is).
    assert "synthesis and verification" not in second.log
    holder = f"pid {first.proc.pid} on {socket.gethostname()}"
    assert f"is in use by {holder}" in second.log
    assert "Traceback" not in second.log
    first.client.request("GET", "/readyz")  # the first serves on, unharmed
    first.signal(signal.SIGKILL)
    first.wait()
    third = server_factory().start()  # a killed holder's lock went with it
    third.signal(signal.SIGTERM)
    assert third.wait() == 0


@pytest.mark.slow
@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_a_second_service_on_the_journal_under_another_name_refuses_to_start(
    server_factory: ServerFactory, tmp_path: Path, link: str
) -> None:
    # Where an older pacer kept its lock file, a symlink to someone else's file: left alone.
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (tmp_path / "journal.sqlite.lock").symlink_to(victim)
    first = server_factory().start()
    assert first.proc is not None
    other = tmp_path / "elsewhere" / "journal.sqlite"
    other.parent.mkdir()
    if link == "hard":
        other.hardlink_to(tmp_path / "journal.sqlite")
    else:
        other.symlink_to(tmp_path / "journal.sqlite")
    second = server_factory(PACER_JOURNAL__PATH=str(other)).launch()
    assert second.wait(60) == 2
    assert f"journal {other} is in use by pid {first.proc.pid} on " in second.log
    assert "Traceback" not in second.log
    assert victim.read_text() == "keep me\n"
    first.signal(signal.SIGTERM)
    assert first.wait() == 0


def test_sigterm_while_the_journal_is_locked_drains_and_exits_zero_then_a_restart_finishes(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    env = {**FAST_JOURNAL, "PACER_NTT__LOG_N": "12", "PACER_SHUTDOWN__DRAIN_S": "3"}
    first = server_factory(**env).start()
    journal = tmp_path / "journal.sqlite"
    with closing(sqlite3.connect(journal, isolation_level=None)) as outside:
        job_id = first.client.submit(100)
        outside.execute("BEGIN EXCLUSIVE")

        wait_until(lambda: readyz_refuses(first.client, "database is locked"),
                   "/readyz to name the lock")  # fmt: skip
        with pytest.raises(ApiError, match=r"503 journal failing for .* database is locked"):
            first.client.submit(1)
        status = subprocess.run(
            [sys.executable, "-m", "pacer", "status", "--url", first.client.base_url],
            env=first.env, cwd=ROOT, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert status.returncode == 0, status.stderr  # the operator sees a service not ready
        assert re.search(r"^journal +FAILING for \d+ s: .*database is locked; \d+ results wait",
                         status.stdout, re.M), status.stdout  # fmt: skip
        first.signal(signal.SIGTERM)
        assert first.wait(30) == 0
        log = first.log
        assert re.search(r"exiting with \d+ results and 0 failed attempts not committed", log), log
        assert log.rstrip().endswith("stopped")
        outside.execute("ROLLBACK")
    assert job_states(journal)[job_id] in ("queued", "running")
    second = server_factory(**env).start()
    wait_until(lambda: job_states(journal)[job_id] == "completed", "the job to complete")
    job = second.client.job(job_id)
    assert job["partitions_done"] == 100
    assert [p["index"] for p in job["partition_results"]] == list(range(100))
    second.signal(signal.SIGTERM)
    assert second.wait() == 0
    # Read once stopped: the job's log line follows its commit, which the journal shows first.
    assert completions_in(first.log) + completions_in(second.log) == Counter({job_id: 1})
