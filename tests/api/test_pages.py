"""The API's lists page by cursor, its times come in ISO 8601 beside epoch seconds, and a
finished job cannot be cancelled (409); over real HTTP against an in-process service."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from pacer.api.inputs import encode_cursor
from pacer.server import Server
from tests.servers import call, until_done

pytestmark = pytest.mark.asyncio


async def walk(server: Server, path: str, key: str, between: Any = None) -> list[Any]:
    """Every item of the list at ``path`` (``key``), page by page; ``between()`` runs after
    each page."""
    seen: list[Any] = []
    cursor: str | None = None
    while True:
        sep = "&" if "?" in path else "?"
        status, page = await call(server, "GET", path + (f"{sep}cursor={cursor}" if cursor else ""))
        assert status == 200, page
        seen += page[key]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen
        if between is not None:
            await between()


async def test_job_pages_walk_every_job_once_while_jobs_arrive(server: Server) -> None:
    server.service.pipeline.stop_dispatching()  # every job stays queued
    before = [(await server.service.submit(1, {}, 0)).id for _ in range(7)]
    arrived: list[str] = []

    async def submit_one() -> None:
        arrived.append((await server.service.submit(1, {}, 0)).id)

    jobs = await walk(server, "/v1/jobs?limit=3", "jobs", submit_one)
    assert [j["id"] for j in jobs] == before[::-1]  # newest first, none twice, none skipped
    assert len(arrived) == 2  # after pages one and two: they sort before the first page
    _, first = await call(server, "GET", "/v1/jobs?limit=2")
    assert [j["id"] for j in first["jobs"]] == arrived[::-1]


async def test_job_pages_keep_the_state_filter(server: Server) -> None:
    server.service.pipeline.stop_dispatching()
    queued = [(await server.service.submit(1, {}, 0)).id for _ in range(3)]
    cancelled = (await server.service.submit(1, {}, 0)).id
    await server.service.cancel(cancelled)
    jobs = await walk(server, "/v1/jobs?state=queued&limit=2", "jobs")
    assert [j["id"] for j in jobs] == queued[::-1]
    _, only = await call(server, "GET", "/v1/jobs?state=cancelled")
    assert ([j["id"] for j in only["jobs"]], only["next_cursor"]) == ([cancelled], None)


async def test_partition_pages_walk_a_job_by_cursor(server: Server) -> None:
    _, created = await call(server, "POST", "/v1/jobs", {"partitions": 5})
    await until_done(server, created["id"])
    path = f"/v1/jobs/{created['id']}/partitions?limit=2"
    partitions = await walk(server, path, "partition_results")
    assert [p["index"] for p in partitions] == [0, 1, 2, 3, 4]
    _, detail = await call(server, "GET", f"/v1/jobs/{created['id']}")
    assert (detail["partitions_next_offset"], detail["partitions_next_cursor"]) == (None, None)


async def test_a_job_detail_says_where_its_next_partitions_start(server: Server) -> None:
    server.service.pipeline.stop_dispatching()
    job = await server.service.submit(250, {}, 0)
    _, detail = await call(server, "GET", f"/v1/jobs/{job.id}")
    assert len(detail["partition_results"]) == 100
    cursor = detail["partitions_next_cursor"]
    _, page = await call(server, "GET", f"/v1/jobs/{job.id}/partitions?cursor={cursor}")
    assert page["partition_results"][0]["index"] == 100 == detail["partitions_next_offset"]
    assert page["offset"] == 100


@pytest.mark.parametrize(
    "query",
    [
        "cursor=%21%21",
        "cursor=" + encode_cursor("partitions", 3),  # another list's
        "cursor=" + encode_cursor("jobs", 1.5),  # a value short
        "cursor=" + encode_cursor("jobs", 1.5, True),  # a bool for the sequence
        "cursor=bm90IGpzb24",  # base64 of "not json"
        "cursor=" + "A" * 201,
    ],
    ids=["not-base64", "other-list", "short", "bool", "not-json", "too-long"],
)
async def test_a_cursor_this_api_did_not_give_is_refused(server: Server, query: str) -> None:
    status, body = await call(server, "GET", f"/v1/jobs?{query}")
    assert (status, body["field"]) == (400, "cursor")
    assert "pass a page's next_cursor back as it is" in body["error"]


async def test_partitions_take_an_offset_or_a_cursor_not_both(server: Server) -> None:
    job = await server.service.submit(3, {}, 0)
    cursor = encode_cursor("partitions", 1)
    path = f"/v1/jobs/{job.id}/partitions?offset=1&cursor={cursor}"
    assert await call(server, "GET", path) == (
        400, {"error": "give offset or cursor, not both", "field": "cursor"}
    )  # fmt: skip
    other = f"/v1/jobs/{job.id}/partitions?cursor=" + encode_cursor("jobs", 1.0, 2)
    assert (await call(server, "GET", other))[0] == 400


def _same_instant(seconds: float, text: str) -> bool:
    assert text.endswith("Z"), text
    return abs(datetime.fromisoformat(text).timestamp() - seconds) < 0.001


async def test_every_time_has_its_iso_8601_twin(server: Server) -> None:
    _, created = await call(server, "POST", "/v1/jobs", {"partitions": 2})
    job = await until_done(server, created["id"])
    assert _same_instant(job["created_at"], job["created_at_iso"])
    assert _same_instant(job["updated_at"], job["updated_at_iso"])
    for partition in job["partition_results"]:
        assert _same_instant(partition["completed_at"], partition["completed_at_iso"])
    _, listing = await call(server, "GET", "/v1/jobs")
    assert listing["jobs"][0]["created_at_iso"] == job["created_at_iso"]
    server.service.pipeline.stop_dispatching()
    pending = await server.service.submit(1, {}, 0)
    _, page = await call(server, "GET", f"/v1/jobs/{pending.id}/partitions")
    [partition] = page["partition_results"]
    assert (partition["completed_at"], partition["completed_at_iso"]) == (None, None)


async def test_a_failed_attempt_has_its_iso_8601_twin(server: Server) -> None:
    server.service.pipeline.stop_dispatching()
    job = await server.service.submit(2, {}, 0)
    await server.service.db(
        server.service.journal.record_attempt, job.id, 1, "proving failed: test", 0, 5
    )
    _, detail = await call(server, "GET", f"/v1/jobs/{job.id}")
    [attempt] = detail["last_failures"]
    assert _same_instant(attempt["at"], attempt["at_iso"])
    [mirrored] = detail["partition_results"][1]["attempts"]
    assert mirrored == attempt


async def test_cancelling_a_finished_job_is_a_conflict_naming_its_state(
    server: Server,
) -> None:
    _, created = await call(server, "POST", "/v1/jobs", {"partitions": 2})
    await until_done(server, created["id"])
    status, body = await call(server, "DELETE", f"/v1/jobs/{created['id']}")
    assert (status, body["state"], body["field"]) == (409, "completed", "id")
    assert body["error"] == (
        f"job {created['id']} is completed: only a queued or running job can be cancelled"
    )
    _, job = await call(server, "GET", f"/v1/jobs/{created['id']}")
    assert job["state"] == "completed"
    value = server.service.registry.get_sample_value
    assert value("pacer_jobs_total", {"outcome": "cancelled"}) == 0


async def test_cancelling_a_cancelled_job_again_answers_it_as_it_is(server: Server) -> None:
    server.service.pipeline.stop_dispatching()
    job = await server.service.submit(4, {}, 0)
    first = await call(server, "DELETE", f"/v1/jobs/{job.id}")
    again = await call(server, "DELETE", f"/v1/jobs/{job.id}")
    assert first[0] == again[0] == 200
    assert again[1] == first[1]
    assert again[1]["state"] == "cancelled"
    assert (
        server.service.registry.get_sample_value("pacer_jobs_total", {"outcome": "cancelled"}) == 1
    )
