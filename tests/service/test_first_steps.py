"""A start's first steps: the pool begins pinning before the journal opens and before `pacer
serve` imports its HTTP server; a start that fails after it began closes it in order."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gpu.workload import GpuNttWorkload
from pacer.config import Settings
from pacer.journal import JournalInUseError, open_journal
from pacer.server import Server
from pacer.service import journal_access
from pacer.service.first_steps import FirstSteps
from pacer.service.lifecycle import Service
from pacer.service.startup import reported
from tests.conftest import FakeClock
from tests.servers import ServerProcess, settings_for
from tests.waits import until

GPU_PATH = {
    "PACER_WORKLOAD": "tests.service.test_gpu_path:shared_gpu_workload",
    "PACER_SYNTHESIS__CORES": "2",
}


class Gate:
    """``workload``'s prepare held until `release` is set; `began` once it has begun, and
    whether the journal's file existed by then."""

    def __init__(self, workload: Any, journal: Path) -> None:
        self.began = threading.Event()
        self.release = threading.Event()
        self.journal_opened: bool | None = None  # the lock creates the file, empty
        prepare = workload.prepare

        def gated(*args: Any) -> None:
            self.journal_opened = journal.exists() and journal.stat().st_size > 0
            self.began.set()
            assert self.release.wait(30)
            prepare(*args)

        self.blocks: tuple[str, ...] | None = None  # the pool's, as its close began
        close = workload.close

        def closing() -> None:
            self.blocks = workload.pool.block_paths if workload.pool is not None else ()
            close()

        workload.prepare, workload.close = gated, closing


def taken(tmp_path: Path, clock: FakeClock | None = None) -> tuple[Settings, FirstSteps, Gate]:
    """The first steps taken as `pacer serve` takes them, the prepare begun and held."""
    settings = settings_for(tmp_path, **GPU_PATH)
    steps = FirstSteps(settings) if clock is None else FirstSteps(settings, clock=clock)
    steps.take()
    gate = Gate(steps.workload, settings.journal.sqlite_path)
    steps.begin_prepare()
    assert gate.began.wait(30)
    return settings, steps, gate


@pytest.mark.asyncio
@pytest.mark.slow
async def test_the_pool_is_prepared_while_the_journal_opens_and_the_jobs_resume(
    tmp_path: Path,
) -> None:
    settings, steps, gate = taken(tmp_path)
    assert gate.journal_opened is False  # the pinning began before the journal was opened
    server = Server(Service(settings, steps, CollectorRegistry()))
    starting = asyncio.ensure_future(server.start())
    try:
        await until(lambda: "resume" in server.service.startup.phases_s, "the jobs resumed")
        assert not starting.done()  # opened and resumed, beside a pool still being prepared
        gate.release.set()
        await starting
        phases = server.service.startup.phases_s
        assert {"first_steps", "open", "prepare", "prepare.pool", "resume", "api"} <= set(phases)
        assert server.service.startup.ready_s is not None
        assert server.service.startup.ready_s >= phases["prepare"]  # counted from the first steps
        assert server.service.startup.pool_origin == {
            "adopted": 0,
            "allocated": steps.plan.pool_slots,
        }
    finally:
        gate.release.set()
        await server.shutdown()


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_second_pacer_on_the_journal_refuses_before_it_pins_anything(
    tmp_path: Path,
) -> None:
    _, first, gate = taken(tmp_path)
    second = FirstSteps(settings_for(tmp_path, **GPU_PATH))
    try:
        with pytest.raises(JournalInUseError, match="is in use by pid"):
            second.take()
        assert not second.taken
        assert second.preparing is None
    finally:
        gate.release.set()
        assert first.preparing is not None
        first.preparing.result(30)
        first.workload.close()
        first.release()


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_start_that_fails_opening_closes_the_pool_once_it_is_prepared(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings, steps, gate = taken(tmp_path)
    settings.journal.sqlite_path.write_bytes(b"not a journal " * 512)
    server = Server(Service(settings, steps, CollectorRegistry()))
    with pytest.raises(Exception, match=r"journal|database"):
        await server.start()
    assert steps.lock is not None
    assert steps.lock.held  # while the pool is being pinned: no second pacer pins beside it
    with caplog.at_level(logging.INFO, logger="pacer.service"):
        closing = asyncio.ensure_future(server.shutdown())
        try:
            await until(
                lambda: "waiting for the pool's preparation" in caplog.text, "the close to wait"
            )
            assert not closing.done()  # a pool closed mid-pinning would leave what follows
            assert steps.lock.held
        finally:
            gate.release.set()
        await closing
    workload = steps.workload
    assert isinstance(workload, GpuNttWorkload)
    assert workload.pool is not None
    assert workload.pool.closed
    assert gate.blocks  # closed once pinned, every block with it
    assert not any(os.path.exists(path) for path in gate.blocks)
    assert not steps.lock.held  # a corrected start need not wait for this process to end


# -- `pacer serve`, a real process -------------------------------------------------------------


@pytest.mark.slow
def test_pacer_serve_begins_the_pool_before_it_imports_its_http_server(tmp_path: Path) -> None:
    record = tmp_path / "watched.json"
    server = ServerProcess(
        tmp_path, PACER_WORKLOAD="tests.service.watched_start:watched_workload",
        PACER_SYNTHESIS__CORES="2", FIRST_STEPS_RECORD=str(record),
    )  # fmt: skip
    try:
        server.start()
        assert json.loads(record.read_text()) == {"preparing": True, "journal_opened": False}
        phases = server.client.status()["startup"]["phases_s"]
        assert phases["first_steps"] > 0
        assert phases["prepare.pool"] > 0
    finally:
        server.signal(signal.SIGTERM)
        assert server.wait() == 0, server.log


@pytest.mark.parametrize("workload", ["signalled_workload", "restoring_workload"])
@pytest.mark.slow
def test_a_signal_before_the_loop_takes_them_drains_in_order(tmp_path: Path, workload: str) -> None:
    # One received while the first steps are taken is held and answered once the service runs;
    # and a library that saved the action it found then and puts it back later puts back the
    # held one (Python's), not the default that would end the process at the next SIGTERM.
    server = ServerProcess(
        tmp_path, PACER_WORKLOAD=f"tests.service.watched_start:{workload}",
        PACER_SYNTHESIS__CORES="2", FIRST_STEPS_RECORD=str(tmp_path / "watched.json"),
    )  # fmt: skip
    try:
        server.launch()
        if workload == "restoring_workload":
            server.client.wait_ready(30)  # the action put back by then
            server.signal(signal.SIGTERM)
        assert server.wait() == 0, server.log
        assert "signal SIGTERM: draining" in server.log
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_start_that_waits_says_for_what_and_names_a_hung_journal_call(
    tmp_path: Path,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Not ready and nothing served yet: without these lines a start stuck on a hung mount
    # would say nothing at all.
    release = threading.Event()

    def hung_open(*args: Any) -> Any:
        assert release.wait(30)
        return open_journal(*args)

    monkeypatch.setattr(journal_access, "open_journal", hung_open)
    server = Server(Service.build(settings_for(tmp_path), CollectorRegistry(), clock))
    server.service.start_report_s = 0.005
    with caplog.at_level(logging.INFO, logger="pacer.service"):
        starting = asyncio.ensure_future(server.start())
        try:
            await until(lambda: server.service.journal_access.calls.running(), "the open to begin")
            clock.advance(31)
            await until(lambda: "journal call hung_open running for 31.0 s" in caplog.text,
                        "the hung call's error")  # fmt: skip
            said = [r.getMessage() for r in caplog.records if "still starting" in r.getMessage()]
            assert said[-1] == (
                "still starting after 31 s: waiting for open 31 s (journal call hung_open for 31 s)"
            )
        finally:
            release.set()
        await starting
    try:
        assert server.service.ready
    finally:
        await server.shutdown()


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_start_waiting_for_the_pool_says_how_long_it_has_been_prepared(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    # The pool began with the first steps, before the journal opened: its time in the report
    # counts from then, not from when the start came to wait for it.
    settings, steps, gate = taken(tmp_path, clock)
    clock.advance(20)  # the first steps done, the pinning under way: the service's imports
    server = Server(Service(settings, steps, CollectorRegistry()))
    server.service.start_report_s = 0.005
    starting = asyncio.ensure_future(server.start())
    try:
        with caplog.at_level(logging.INFO, logger="pacer.service"):
            await until(
                lambda: "prepare" in server.service.startup.running, "the wait for the pool"
            )
            clock.advance(11)
            await until(lambda: "waiting for prepare 31 s" in caplog.text, "a report of it")
        gate.release.set()
        await starting
        assert server.service.startup.phases_s["prepare"] == steps.prepare_s
    finally:
        gate.release.set()
        await asyncio.wait([starting])
        await server.shutdown()


@pytest.mark.asyncio
async def test_a_start_report_that_fails_is_logged_and_the_reports_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Raised into the start, it would fail a start that had nothing wrong with it.
    said: list[int] = []

    def say() -> None:
        said.append(len(said))
        if len(said) == 1:
            raise OSError("the notify socket is gone")

    with caplog.at_level(logging.ERROR, logger="pacer.service"):
        async with reported(say, 0.001):
            await until(lambda: len(said) >= 3, "reports after the failed one")
    assert "saying what the start waits for failed" in caplog.text
