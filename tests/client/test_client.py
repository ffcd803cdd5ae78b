"""`pacer.client` against an in-process service over real HTTP: each call, its errors, and
Retry-After honoured within its bounds."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from pacer.client import BlockingClient, Client, ResponseError, UnreachableError
from pacer.server import Server
from pacer.service.lifecycle import Service
from tests.servers import refusing_port, settings_for, url

pytestmark = pytest.mark.asyncio
TOKEN = "client-test-token-0123456789"


@pytest_asyncio.fixture
async def pacer(server: Server) -> AsyncIterator[Client]:
    async with Client(url(server, "")) as client:
        yield client


async def started(tmp_path: Path, **env: str) -> Server:
    svc = Server(Service.build(settings_for(tmp_path, **env), CollectorRegistry()))
    await svc.start()
    return svc


async def test_submit_and_wait_follow_jobs_to_the_end_with_progress(pacer: Client) -> None:
    ids = [await pacer.submit(3, {"log_n": 8}, priority=1) for _ in range(2)]
    seen: list[tuple[list[str], float]] = []
    jobs = await pacer.wait(ids, lambda js, s: seen.append(([j["state"] for j in js], s)),
                            poll_s=0.02)  # fmt: skip
    assert [j["id"] for j in jobs] == ids
    assert all(j["state"] == "completed" and len(j["result_digest"]) == 64 for j in jobs)
    assert seen[-1][0] == ["completed", "completed"]  # the last poll is reported too
    assert [s for _, s in seen] == sorted(s for _, s in seen)
    assert (await pacer.job(ids[0]))["params"] == {"log_n": 8}


async def test_status_partitions_and_readiness_of_a_live_service(pacer: Client) -> None:
    assert await pacer.wait_ready(timeout_s=30) < 30
    assert await pacer.wait_ready(timeout_s=30, path="/healthz") < 30
    job_id = await pacer.submit(5)
    await pacer.wait([job_id], poll_s=0.02)
    page = await pacer.partitions(job_id, offset=1, limit=3)
    assert [p["index"] for p in page["partition_results"]] == [1, 2, 3]
    assert page["next_offset"] == 4
    status = await pacer.status()
    assert (status["ready"], status["jobs"]["completed"]) == (True, 1)
    assert any(g["idle_s"] is not None for g in status["gpus"])  # one has proved by now


async def test_an_idempotency_key_gives_the_same_job(pacer: Client) -> None:
    first = await pacer.submit(1, idempotency_key="nightly-7")
    assert await pacer.submit(1, idempotency_key="nightly-7") == first


async def test_an_error_answer_carries_the_services_body(pacer: Client) -> None:
    with pytest.raises(ResponseError) as info:
        await pacer.job("0123456789abcdef")
    assert (info.value.status, info.value.field) == (404, "id")
    assert info.value.body == {"error": "no job '0123456789abcdef'", "field": "id"}
    assert str(info.value) == "GET /v1/jobs/0123456789abcdef: 404 no job '0123456789abcdef'"
    with pytest.raises(ResponseError) as info:
        await pacer.submit(0)
    assert (info.value.status, info.value.field) == (422, "partitions")
    assert "partitions must be between 1 and" in str(info.value.error)


async def test_jobs_lists_a_page_filtered_by_state(server: Server, pacer: Client) -> None:
    server.service.pipeline.stop_dispatching()  # every job stays queued
    queued = [await pacer.submit(1) for _ in range(3)]
    cancelled = await pacer.submit(1)
    await pacer.cancel(cancelled)
    page = await pacer.jobs(limit=2)
    assert [j["id"] for j in page["jobs"]] == [cancelled, queued[2]]  # newest first
    rest = await pacer.jobs(limit=10, cursor=page["next_cursor"])
    assert ([j["id"] for j in rest["jobs"]], rest["next_cursor"]) == (queued[1::-1], None)
    only = await pacer.jobs(state="cancelled")
    assert [j["id"] for j in only["jobs"]] == [cancelled]
    assert [j["id"] for j in (await pacer.jobs(state="queued"))["jobs"]] == queued[::-1]


async def test_cancel_is_idempotent_and_refuses_a_finished_job(
    server: Server, pacer: Client
) -> None:
    done = await pacer.submit(1)
    await pacer.wait([done], poll_s=0.02)
    server.service.pipeline.stop_dispatching()
    job_id = await pacer.submit(4)
    first = await pacer.cancel(job_id)
    assert first["state"] == "cancelled"
    assert (await pacer.cancel(job_id))["state"] == "cancelled"  # again: no error
    assert (await pacer.job(job_id))["state"] == "cancelled"
    with pytest.raises(ResponseError) as info:
        await pacer.cancel(done)
    assert (info.value.status, info.value.body["state"]) == (409, "completed")


@pytest.mark.slow
async def test_a_full_backlog_is_retried_after_its_retry_after(tmp_path: Path) -> None:
    svc = await started(tmp_path, PACER_API__MAX_BACKLOG="10")
    try:
        svc.service.pipeline.stop_dispatching()
        waited: list[float] = []
        async with Client(url(svc, "")) as pacer:
            blocking = await pacer.submit(8)

            async def sleep(seconds: float) -> None:
                waited.append(seconds)
                await pacer.cancel(blocking)  # room in the backlog by the time of the retry

            retrying = Client(url(svc, ""), sleep=sleep)
            async with retrying:
                job_id = await retrying.submit(3)
        assert waited == [30.0]  # the Retry-After of a service with no proving rate yet
        assert svc.service.pipeline.waiting(job_id) == 3
    finally:
        await svc.shutdown()


async def test_not_serving_yet_is_retried_after_its_retry_after(server: Server) -> None:
    server.service.ready = False  # a service still starting: 503 with Retry-After: 1
    waited: list[float] = []

    async def sleep(seconds: float) -> None:
        waited.append(seconds)
        server.service.ready = True  # started by the time of the retry

    try:
        async with Client(url(server, ""), sleep=sleep) as pacer:
            status = await pacer.status()
    finally:
        server.service.ready = True
    assert (waited, status["ready"]) == ([1.0], True)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("retries", "most_s", "waits"),
    [(0, 60.0, []), (2, 60.0, [30.0, 30.0]), (3, 5.0, [5.0, 5.0, 5.0])],
    ids=["no-retries", "two-retries", "capped-wait"],
)
async def test_retries_are_bounded_then_the_refusal_is_raised(
    tmp_path: Path, retries: int, most_s: float, waits: list[float]
) -> None:
    svc = await started(tmp_path, PACER_API__MAX_BACKLOG="10")
    try:
        svc.service.pipeline.stop_dispatching()
        waited: list[float] = []

        async def sleep(seconds: float) -> None:
            waited.append(seconds)

        async with Client(url(svc, ""), retries=retries, max_retry_wait_s=most_s,
                          sleep=sleep) as pacer:  # fmt: skip
            await pacer.submit(8)
            with pytest.raises(ResponseError) as info:
                await pacer.submit(3)
        assert (info.value.status, info.value.retry_after_s) == (429, 30.0)
        assert str(info.value.error).startswith("backlog full")
        assert waited == waits
        assert len(await svc.service.db(svc.service.journal.list_jobs)) == 1  # no other job
    finally:
        await svc.shutdown()


async def test_an_error_without_retry_after_is_not_retried(pacer: Client) -> None:
    waited: list[float] = []

    async def sleep(seconds: float) -> None:
        waited.append(seconds)

    async with Client(pacer.base_url, sleep=sleep) as client:
        with pytest.raises(ResponseError):
            await client.job("0123456789abcdef")
    assert waited == []


@pytest.mark.slow
async def test_the_token_is_sent_with_each_request(tmp_path: Path) -> None:
    svc = await started(tmp_path, PACER_API__TOKEN=TOKEN)
    try:
        async with Client(url(svc, "")) as anonymous:
            with pytest.raises(ResponseError) as info:
                await anonymous.submit(1)
            assert info.value.status == 401
        async with Client(url(svc, ""), TOKEN) as pacer:
            job_id = await pacer.submit(1)
            assert (await pacer.cancel(job_id))["id"] == job_id
    finally:
        await svc.shutdown()


async def test_wait_gives_up_after_its_timeout(server: Server, pacer: Client) -> None:
    server.service.pipeline.stop_dispatching()
    job_id = await pacer.submit(1)
    with pytest.raises(TimeoutError, match=f"1 of 1 jobs not ended after 0 s: {job_id}"):
        await pacer.wait([job_id], poll_s=0.01, timeout_s=0)


async def test_no_service_is_unreachable_and_says_why() -> None:
    with refusing_port() as port:
        async with Client(f"http://127.0.0.1:{port}") as pacer:
            with pytest.raises(UnreachableError) as info:
                await pacer.status()
    assert (info.value.reason, info.value.timed_out) == ("Connection refused", False)
    assert str(info.value) == f"cannot reach pacer at http://127.0.0.1:{port}: Connection refused"


@pytest.mark.slow
async def test_a_service_that_never_answers_times_out() -> None:
    with socket.socket() as listener:  # accepts connections and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        async with Client(f"http://127.0.0.1:{port}", timeout_s=0.2) as pacer:
            with pytest.raises(UnreachableError) as info:
                await pacer.status()
    assert info.value.timed_out
    assert str(info.value).startswith(
        f"GET /v1/status: no answer from pacer at http://127.0.0.1:{port}"
    )
    assert str(info.value).endswith("within 0.2 s")


async def test_wait_ready_gives_up_on_no_service_before_its_timeout() -> None:
    with refusing_port() as port:
        async with Client(f"http://127.0.0.1:{port}", sleep=_no_wait) as pacer:
            with pytest.raises(UnreachableError):
                await pacer.wait_ready(timeout_s=3600, unreachable_s=0)


async def _no_wait(seconds: float) -> None:
    await asyncio.sleep(0)


@pytest.mark.parametrize(
    ("options", "rule"),
    [({"timeout_s": 0}, "timeout_s must be more than 0"),
     ({"retries": -1}, "retries and max_retry_wait_s must be at least 0")],
    ids=["timeout", "retries"],
)  # fmt: skip
async def test_bad_bounds_are_refused_at_construction(options: dict[str, Any], rule: str) -> None:
    with pytest.raises(ValueError, match=rule):
        Client("http://127.0.0.1:9470", **options)


async def test_the_blocking_client_makes_the_same_calls(server: Server) -> None:
    pacer = BlockingClient(url(server, "/"))
    job_id = await asyncio.to_thread(pacer.submit, 2)
    (job,) = await asyncio.to_thread(pacer.wait, [job_id], None, 0.02)
    assert job["state"] == "completed"
    assert (await asyncio.to_thread(pacer.jobs, "completed"))["jobs"][0]["id"] == job_id
    assert (await asyncio.to_thread(pacer.status))["jobs"]["completed"] == 1
    with pytest.raises(ResponseError) as info:
        await asyncio.to_thread(pacer.cancel, job_id)
    assert info.value.status == 409
