"""A journal call that never returns (a stat or an fsync on a hung mount, a query stuck on a
lock): it raises nothing, yet the service must not look healthy. Past
``PACER_JOURNAL__STALL_S`` on the virtual clock /readyz names the call, the gauge shows its age,
/v1/status answers without waiting on the journal, and one error is logged; once the call
returns, all of it clears and one line says how long it took.

An in-process service over real HTTP, on a real SQLite file; the hung call waits on an Event
the test holds.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from pacer.journal import JobRecord, Journal, PartitionResult
from pacer.server import Server
from pacer.service.lifecycle import Service
from tests.conftest import FakeClock
from tests.servers import call, settings_for
from tests.tiers import starts_something
from tests.waits import until

pytestmark = pytest.mark.asyncio
STALL_S = 30.0
GAUGE = "pacer_journal_call_running_seconds"
REASON = "journal call check_file running for 31 s (more than 30 s)"


class HangingJournal(Journal):
    """The real journal, whose call ``hang_in`` (``check_file``, a stat of the file first in
    every commit round; ``complete_partitions``; ``close``) hangs while ``hang`` is set, until
    ``release`` is; then it goes on, or raises as a failing disk would if ``fail`` is set.
    ``hung`` says one has begun."""

    def __init__(self, path: Path, hang_in: str = "check_file") -> None:
        super().__init__(path)
        self.hang_in = hang_in
        self.hang = threading.Event()
        self.release = threading.Event()
        self.hung = threading.Event()
        self.fail = False

    def _hang(self, call: str) -> None:
        if call == self.hang_in and self.hang.is_set():
            self.hung.set()
            if not self.release.wait(timeout=30):
                raise TimeoutError("the hung journal call was never released")
            if self.fail:
                raise sqlite3.OperationalError("disk I/O error")

    def check_file(self) -> None:
        self._hang("check_file")
        super().check_file()

    def complete_partitions(self, items: Iterable[PartitionResult]) -> list[JobRecord]:
        self._hang("complete_partitions")
        return super().complete_partitions(items)

    def close(self) -> None:
        self._hang("close")
        super().close()


async def hanging_service(
    tmp_path: Path, clock: FakeClock, hang_in: str = "check_file", **env: str
) -> Server:
    """An opened service on ``clock`` whose journal is a `HangingJournal`."""
    svc = Server(Service.build(settings_for(tmp_path, **env), CollectorRegistry(), clock))
    await svc.service.open()
    await svc.service.db(svc.service.journal.close)
    svc.service.journal_access.journal = await svc.service.db(
        HangingJournal, svc.service.settings.journal.path, hang_in
    )
    return svc


def hanging(svc: Server) -> HangingJournal:
    assert isinstance(svc.service.journal, HangingJournal)
    return svc.service.journal


@pytest_asyncio.fixture
@starts_something
async def svc(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Server]:
    """A started service on the virtual clock whose journal can hang."""
    service = await hanging_service(tmp_path, clock)
    await service.start()
    yield service
    hanging(service).release.set()
    await service.shutdown()


def stall_logs(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.getMessage().startswith("journal call ")
    ]


async def test_a_hung_call_is_unready_past_the_limit_and_clears_when_it_returns(
    svc: Server, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "pacer.service")
    assert svc.service.settings.journal.stall_s == STALL_S
    registry = svc.service.registry
    journal = hanging(svc)
    journal.hang.set()
    await until(journal.hung.is_set, "the commit loop's check_file to hang")

    clock.advance(29.0)
    assert await call(svc, "GET", "/readyz") == (200, {"status": "ready"})
    assert registry.get_sample_value(GAUGE) == 29.0
    assert stall_logs(caplog) == []

    clock.advance(2.0)
    status, body = await call(svc, "GET", "/readyz")
    assert (status, body["reasons"]) == (503, [REASON])
    assert registry.get_sample_value(GAUGE) == 31.0
    assert registry.get_sample_value("pacer_ready") == 0.0
    assert registry.get_sample_value("pacer_journal_healthy") == 1.0  # nothing failed
    status, body = await call(svc, "GET", "/v1/status")  # answered, not queued behind it
    assert (status, body["ready"], body["reasons"]) == (200, False, [REASON])
    assert body["jobs"] is None  # the journal's to tell, and it does not answer
    assert body["journal"]["stall_s"] == STALL_S
    [running] = body["journal"]["calls"]
    assert (running["call"], running["running_s"]) == ("check_file", 31.0)
    assert running["thread"].startswith("pacer-journal")
    status, body = await call(svc, "POST", "/v1/jobs", {"partitions": 4})  # not queued
    assert (status, body["error"]) == (503, f"{REASON}: not accepting new jobs")
    [(level, message)] = stall_logs(caplog)  # once, however often it is asked
    assert level == logging.ERROR
    assert message.startswith(
        "journal call check_file running for 31.0 s (more than PACER_JOURNAL__STALL_S=30 s) "
        f"on journal {svc.service.settings.journal.path}: "
    )

    clock.advance(4.0)
    journal.hang.clear()
    journal.release.set()
    await until(lambda: call(svc, "GET", "/readyz"), "/readyz to answer 200 again",
                done=lambda answer: answer == (200, {"status": "ready"}))  # fmt: skip
    assert registry.get_sample_value(GAUGE) == 0.0
    # Logged on the journal's thread as the call returns.
    await until(lambda: len(stall_logs(caplog)) > 1, "the call's return to be logged")
    assert stall_logs(caplog)[1:] == [
        (logging.INFO, "journal call check_file returned after 35.0 s")
    ]
    status, body = await call(svc, "GET", "/v1/status")
    assert (body["ready"], body["jobs"]["queued"]) == (True, 0)
    assert [c["running_s"] for c in body["journal"]["calls"]] in ([], [0.0])  # a commit round


async def test_a_call_that_passes_the_limit_unseen_is_logged_as_it_returns(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "pacer.service")
    svc = await hanging_service(tmp_path, clock)  # opened: no watch, nothing asks meanwhile
    journal = hanging(svc)
    journal.hang.set()
    try:
        hung = asyncio.ensure_future(svc.service.db(journal.check_file))
        await until(journal.hung.is_set, "check_file to hang")
        clock.advance(STALL_S + 0.5)
        journal.release.set()
        await hung
    finally:
        journal.release.set()
        await svc.shutdown()
    [(level, message)] = stall_logs(caplog)
    assert level == logging.ERROR
    assert message.startswith("journal call check_file took 30.5 s (more than ")
    assert svc.service.journal_access.calls.running() == []
