"""A journal out of reach when pacer starts (its directory not there yet, PostgreSQL down) is
waited for: the service stays up and not ready, /readyz says why, only the probes answer, and
it starts once the journal is back. Exit status 2 is kept for what a restart cannot mend."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from pacer.client import ApiError, BlockingClient
from pacer.journal.health import Backoff
from pacer.server import Server
from pacer.service.lifecycle import Service
from tests.postgres_server import PostgresServer, PostgresUnavailableError
from tests.servers import (
    ServerFactory,
    call,
    free_port,
    readyz_refuses,
    settings_for,
    until_done,
)
from tests.waits import until, wait_until

FAST_RETRY = Backoff(first_s=0.01, max_s=0.05, jitter=0.0)


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_journal_not_there_at_start_is_waited_for_not_ready(tmp_path: Path) -> None:
    mount = tmp_path / "not-mounted-yet"  # where the journal's disk will be
    settings = settings_for(tmp_path, PACER_JOURNAL__PATH=str(mount / "journal.sqlite"))
    server = Server(Service.build(settings, CollectorRegistry(), backoff=FAST_RETRY))
    starting = asyncio.ensure_future(server.start())
    try:
        await until(lambda: server.port is not None or starting.done(), "the API to listen")

        async def readyz() -> tuple[int, Any]:
            return await call(server, "GET", "/readyz")

        status, body = await until(readyz, "/readyz to say why",
                                   done=lambda a: "journal failing" in str(a[1]))  # fmt: skip
        assert status == 503
        assert body["reasons"][0] == "starting"
        assert "No such file or directory" in body["reasons"][1]
        assert (await call(server, "GET", "/healthz"))[0] == 200  # alive: not to be restarted
        status, refused = await call(server, "POST", "/v1/jobs", {"partitions": 1})
        assert (status, refused["error"].startswith("not serving yet: starting; journal")) == (
            503, True
        )  # fmt: skip
        assert not starting.done()
        mount.mkdir()  # the disk is there: the start goes on by itself
        await starting
        assert await readyz() == (200, {"status": "ready"})
        status, job = await call(server, "POST", "/v1/jobs", {"partitions": 2})
        assert status == 202
        assert (await until_done(server, job["id"]))["state"] == "completed"
    finally:
        if not starting.done():
            starting.cancel()
        await server.shutdown()


def until_refused_naming(client: BlockingClient, reason: str) -> None:
    wait_until(lambda: readyz_refuses(client, reason), f"/readyz to name {reason!r}")


@pytest.mark.slow
def test_pacer_serve_waits_for_its_journals_directory(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    mount = tmp_path / "not-mounted-yet"
    server = server_factory(PACER_JOURNAL__PATH=str(mount / "journal.sqlite"),
                            PACER_API__PORT=str(free_port())).launch()  # fmt: skip
    until_refused_naming(server.client, "No such file or directory")
    assert server.proc is not None
    assert server.proc.poll() is None  # up, waiting: no exit for systemd to give up on
    with pytest.raises(ApiError, match="503 not serving yet: starting"):
        server.client.submit(1)
    mount.mkdir()
    server.client.wait_ready(60)
    job_id = server.client.submit(2)
    wait_until(lambda: server.client.job(job_id)["state"] == "completed", "the job to complete")
    server.signal(signal.SIGTERM)
    assert server.wait() == 0


@pytest.mark.slow
def test_pacer_serve_waits_for_postgresql_down_at_start(server_factory: ServerFactory) -> None:
    database = PostgresServer()
    try:
        database.start()
    except PostgresUnavailableError as exc:
        pytest.skip(str(exc))
    try:
        url = database.create_database()
        database.halt()
        server = server_factory(PACER_JOURNAL__URL=url, PACER_JOURNAL__HOST="waiting-host",
                                PACER_API__PORT=str(free_port())).launch()  # fmt: skip
        until_refused_naming(server.client, "journal failing for")
        assert server.proc is not None
        assert server.proc.poll() is None
        database.resume()
        server.client.wait_ready(90)
        job_id = server.client.submit(2)
        wait_until(lambda: server.client.job(job_id)["state"] == "completed", "the job")
        server.signal(signal.SIGTERM)
        assert server.wait() == 0
    finally:
        database.stop()


@pytest.mark.slow
def test_a_journal_that_is_no_database_is_refused_with_exit_2(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    (tmp_path / "journal.sqlite").write_bytes(b"not a database, and never one" * 100)
    server = server_factory().launch()
    assert server.wait(60) == 2
    assert "file is not a database" in server.log
    assert "Traceback" not in server.log
