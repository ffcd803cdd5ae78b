"""A job's write that does not return (a hung disk) answers 503 with Retry-After within
PACER_JOURNAL__ACCEPT_WAIT_S, and nothing is half-accepted: a write not yet begun never runs,
and one that lands later is deleted again. An in-process service over real HTTP, on a real
SQLite file, whose job writes wait on an Event the test holds."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from pacer.journal import JobRecord
from pacer.server import Server
from tests.conftest import FakeClock
from tests.servers import JSON, call, url
from tests.service.test_journal_hang import HangingJournal, hanging, hanging_service
from tests.tiers import starts_something
from tests.waits import until

pytestmark = pytest.mark.asyncio
WAIT_S = "0.2"
REFUSED = (
    "the journal did not take the job within 0.2 s (PACER_JOURNAL__ACCEPT_WAIT_S): not accepted"
)


class HangingWrites(HangingJournal):
    """`HangingJournal` whose job writes hang too (``hang_in`` add_job or add_job_once);
    ``written`` counts those that went through."""

    def __init__(self, path: Path, hang_in: str = "add_job") -> None:
        super().__init__(path, hang_in)
        self.written = 0
        self.lock = threading.Lock()

    def add_job(self, *args: Any) -> JobRecord:
        self._hang("add_job")
        with self.lock:
            self.written += 1
        return super().add_job(*args)

    def add_job_once(self, *args: Any) -> tuple[JobRecord, bool]:
        self._hang("add_job_once")
        with self.lock:
            self.written += 1
        return super().add_job_once(*args)


async def started(tmp_path: Path, clock: FakeClock, hang_in: str) -> Server:
    svc = await hanging_service(tmp_path, clock, PACER_JOURNAL__ACCEPT_WAIT_S=WAIT_S)
    service = svc.service
    await service.db(service.journal.close)
    service.journal_access.journal = await service.db(
        HangingWrites, service.settings.journal.path, hang_in
    )
    await svc.start()
    return svc


@pytest_asyncio.fixture
@starts_something
async def servers(tmp_path: Path, clock: FakeClock) -> AsyncIterator[list[Server]]:
    made: list[Server] = []
    yield made
    for svc in made:
        hanging(svc).release.set()
        await svc.shutdown()


async def post(svc: Server, headers: dict[str, str] | None = None) -> tuple[int, Any, str | None]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url(svc, "/v1/jobs"), json={"partitions": 3}, headers=headers) as r,
    ):
        return r.status, await r.json(), r.headers.get("Retry-After")


async def jobs(svc: Server) -> list[JobRecord]:
    return await svc.service.db(svc.service.journal.list_jobs)


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "idempotency-key"])
async def test_a_hung_write_is_refused_and_its_late_job_deleted(
    tmp_path: Path, clock: FakeClock, servers: list[Server], keyed: bool
) -> None:
    svc = await started(tmp_path, clock, "add_job_once" if keyed else "add_job")
    servers.append(svc)
    journal = hanging(svc)
    assert isinstance(journal, HangingWrites)
    headers = {"Idempotency-Key": "k-1"} if keyed else None
    journal.hang.set()
    status, body, retry_after = await post(svc, headers)
    assert (status, body["error"], retry_after) == (503, REFUSED, "5")
    assert journal.hung.is_set()  # the write began and hangs
    assert svc.service.pipeline.backlog == 0
    journal.hang.clear()
    journal.release.set()  # the write lands now: its job is deleted again
    await until(lambda: journal.written == 1, "the late write to land")
    await until(lambda: jobs(svc), "the late job to be deleted", done=lambda found: found == [])
    assert svc.service.pipeline.backlog == 0
    status, body, _ = await post(svc, headers)  # the key is free again
    assert status == 202, body
    assert [job.id for job in await jobs(svc)] == [body["id"]]


async def test_a_write_queued_behind_a_hung_call_never_runs(
    tmp_path: Path, clock: FakeClock, servers: list[Server]
) -> None:
    svc = await started(tmp_path, clock, "check_file")  # the commit round's first call
    servers.append(svc)
    journal = hanging(svc)
    assert isinstance(journal, HangingWrites)
    journal.hang.set()
    await until(journal.hung.is_set, "the commit round's check_file to hang")
    status, body, retry_after = await post(svc)
    assert (status, body["error"], retry_after) == (503, REFUSED, "5")
    journal.hang.clear()
    journal.release.set()
    await until(lambda: call(svc, "GET", "/readyz"), "the journal to answer again",
                done=lambda answer: answer[0] == 200)  # fmt: skip
    assert await jobs(svc) == []
    assert journal.written == 0  # dropped before it began
    status, body = await call(svc, "POST", "/v1/jobs", {"partitions": 3}, headers=JSON)
    assert status == 202, body
