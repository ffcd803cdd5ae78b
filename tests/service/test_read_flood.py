"""Reads bounded so that writes keep their share: past PACER_API__MAX_READS a read is refused
at once (503, Retry-After), writes and probes never are, and under a flood of reads an
authorised POST still answers promptly."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from pacer.api import views
from pacer.server import Server
from pacer.service.lifecycle import Service
from tests.servers import JSON, ServerProcess, call, settings_for
from tests.tiers import starts_something

pytestmark = pytest.mark.asyncio
TOKEN = "r" * 40
AUTH = {**JSON, "Authorization": f"Bearer {TOKEN}"}


@pytest_asyncio.fixture
@starts_something
async def one_read(tmp_path: Path) -> AsyncIterator[Server]:
    svc = Server(Service.build(
        settings_for(tmp_path, PACER_API__MAX_READS="1", PACER_API__TOKEN=TOKEN),
        CollectorRegistry(),
    ))  # fmt: skip
    await svc.start()
    yield svc
    await svc.shutdown()


async def test_a_read_past_the_limit_is_refused_at_once_and_writes_pass(
    one_read: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = asyncio.Event()
    entered = asyncio.Event()
    page = views.jobs_page

    async def held_page(*args: Any) -> Any:
        entered.set()
        await held.wait()
        return await page(*args)

    monkeypatch.setattr(views, "jobs_page", held_page)
    first = asyncio.create_task(call(one_read, "GET", "/v1/jobs"))
    await asyncio.wait_for(entered.wait(), 10)
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{one_read.port}/v1/status") as response,
    ):
        assert response.status == 503
        assert response.headers["Retry-After"] == "1"
        body = await response.json()
    assert "1 reads are being answered (PACER_API__MAX_READS)" in body["error"]
    assert (await call(one_read, "GET", "/readyz"))[0] == 200  # probes are not reads here
    assert (await call(one_read, "GET", "/metrics"))[0] == 200
    status, job = await call(one_read, "POST", "/v1/jobs", {"partitions": 1}, headers=AUTH)
    assert status == 202, job
    held.set()
    assert (await first)[0] == 200
    assert (await call(one_read, "GET", f"/v1/jobs/{job['id']}"))[0] == 200  # a slot again
    refused = one_read.service.registry.get_sample_value(
        "pacer_api_refusals_total", {"reason": "reads_full"}
    )
    assert refused == 1


async def test_posts_answer_promptly_under_a_read_flood(server_factory: Any) -> None:
    # start() waits through the blocking client, which runs a loop of its own: off this one.
    factory = server_factory(PACER_WORKLOAD="noop", PACER_API__TOKEN=TOKEN)
    server: ServerProcess = await asyncio.to_thread(factory.start)
    base = f"http://127.0.0.1:{server.port}"
    stop = asyncio.Event()
    answered = [0]

    async def read(session: aiohttp.ClientSession, paths: list[str]) -> None:
        while not stop.is_set():
            for path in paths:
                async with session.get(base + path) as response:
                    await response.read()
                    answered[0] += 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async with session.post(base + "/v1/jobs", json={"partitions": 1000}, headers=AUTH) as r:
            job = (await r.json())["id"]
        paths = [
            "/v1/status",
            "/v1/jobs",
            f"/v1/jobs/{job}",
            f"/v1/jobs/{job}/partitions?limit=1000",
        ]
        readers = [asyncio.create_task(read(session, paths[i % 4 :] + paths[: i % 4]))
                   for i in range(16)]  # fmt: skip
        try:
            while answered[0] < 64:  # the flood under way
                await asyncio.sleep(0.05)
            took = []
            for _ in range(20):
                began = time.perf_counter()
                async with session.post(base + "/v1/jobs", json={"partitions": 10},
                                        headers=AUTH) as r:  # fmt: skip
                    assert r.status == 202, await r.text()
                took.append(time.perf_counter() - began)
        finally:
            stop.set()
            await asyncio.gather(*readers, return_exceptions=True)
    assert max(took) <= 2.0, (statistics.median(took), max(took))
