"""`pacer submit --wait`, `pacer jobs` and `pacer cancel` against an in-process service, over
real HTTP through `pacer.client`."""

from __future__ import annotations

import asyncio
import re

import pytest

from pacer.__main__ import main
from pacer.server import Server
from tests.servers import url

pytestmark = pytest.mark.asyncio


async def pacer(*argv: str) -> int:
    """``pacer ARGV``, run on a thread (its client runs an event loop of its own)."""
    return await asyncio.to_thread(main, list(argv))


async def test_submit_wait_shows_each_digest_whole(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await pacer("submit", "--jobs", "2", "--partitions", "2", "--wait",
                       "--url", url(server, "")) == 0  # fmt: skip
    out = capsys.readouterr().out
    digests = re.findall(r"^[0-9a-f]{16} +completed +2 +([0-9a-f]+)$", out, re.M)
    assert [len(d) for d in digests] == [64, 64], out


async def test_jobs_lists_the_newest_first_filtered_by_state(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    server.service.pipeline.stop_dispatching()
    ids = [(await server.service.submit(2, {}, 0)).id for _ in range(3)]
    await server.service.cancel(ids[1])
    assert await pacer("jobs", "--url", url(server, "")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["job", "state", "done", "priority", "created", "(UTC)",
                                "result", "digest", "/", "error"]  # fmt: skip
    assert [line.split()[:3] for line in lines[2:]] == [
        [ids[2], "queued", "0/2"],
        [ids[1], "cancelled", "0/2"],
        [ids[0], "queued", "0/2"],
    ]
    assert await pacer("jobs", "--state", "queued", "--limit", "1", "--url", url(server, "")) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[2:]] == [ids[2], "(older"]
    assert await pacer("jobs", "--state", "failed", "--url", url(server, "")) == 0
    assert capsys.readouterr().out == "no failed jobs\n"


async def test_cancel_ends_a_job_and_refuses_one_unknown(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    server.service.pipeline.stop_dispatching()
    job_id = (await server.service.submit(4, {}, 0)).id
    assert await pacer("cancel", job_id, "--url", url(server, "")) == 0
    assert capsys.readouterr().out == f"{job_id} cancelled (0 of 4 partitions were done)\n"
    assert await pacer("cancel", job_id, "--url", url(server, "")) == 0  # again: no error
    record = await server.service.db(server.service.journal.get_job, job_id)
    assert record is not None
    assert record.state.value == "cancelled"
    assert await pacer("cancel", "0123456789abcdef", "--url", url(server, "")) == 1
    assert capsys.readouterr().err == (
        "pacer: cannot cancel 0123456789abcdef: 404 no job '0123456789abcdef'\n"
    )
