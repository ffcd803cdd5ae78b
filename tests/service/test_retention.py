"""Retention against steps of the wall clock: `ClockWatch` and `Retention` on virtual clocks,
then a service whose wall clock is set forward, and back and right again, that prunes no
finished job for it, in-process and as a real process under libfaketime."""

from __future__ import annotations

import glob
import logging
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from pacer.service.lifecycle import Service
from pacer.service.retention import ClockWatch, Retention
from tests.conftest import FakeClock, ensure_debian_package
from tests.servers import ServerProcess, settings_for, until_completed
from tests.waits import wait_until

DAY_S = 86400.0
WEEK_S = 7 * DAY_S


class SteppedWall:
    """A wall clock that runs with the real one, set forward or back by ``step``."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset_s

    def step(self, seconds: float) -> None:
        self.offset_s += seconds


def test_a_watch_tells_a_step_from_time_passing() -> None:
    steady = FakeClock(100.0)
    watch = ClockWatch(steady)
    assert watch.expected() is None
    assert watch.read(1_000.0) == 0.0  # the first reading anchors
    steady.advance(60)
    assert watch.read(1_060.4) == 0.0  # within the tolerance: slewed, not stepped
    assert watch.quiet_s() == float("inf")
    steady.advance(60)
    assert watch.read(1_120.4 + 8 * DAY_S) == pytest.approx(8 * DAY_S)
    assert watch.steps == 1
    assert watch.last_step_s == pytest.approx(8 * DAY_S)
    steady.advance(5)
    assert watch.quiet_s() == 5.0
    assert watch.expected() == pytest.approx(1_125.4 + 8 * DAY_S)  # it follows the new time
    assert watch.read(1_125.4 - 30 * DAY_S) == pytest.approx(-38 * DAY_S)
    with pytest.raises(ValueError, match="tolerance_s must be > 0, got 0"):
        ClockWatch(steady, 0)


def test_nothing_is_pruned_for_the_retention_after_a_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    steady, wall = FakeClock(0.0), FakeClock(1e9)
    retention = Retention(WEEK_S, wall=wall, steady=steady)
    assert not retention.watch_host()
    assert retention.prune_now() == 1e9
    steady.advance(10)
    wall.advance(10 + 8 * DAY_S)
    # A prune between the step and the next reading measures from the clock as it ran.
    assert retention.prune_now() == 1e9 + 10
    with caplog.at_level(logging.INFO, "pacer.service"):
        assert retention.watch_host()
        assert retention.prune_now() is None
        assert retention.prune_now() is None
    assert [r.getMessage()[:48] for r in caplog.records] == [
        "this host's wall clock stepped +691200.0 s (set,",
        "finished jobs are not pruned for 604800 s more: ",
    ]  # the pause said once
    steady.advance(WEEK_S)
    wall.advance(WEEK_S)
    assert retention.prune_now() == 1e9 + 10 + 8 * DAY_S + WEEK_S  # a week on: pruned again


def test_a_fleets_journal_clock_is_watched_too() -> None:
    steady, wall = FakeClock(0.0), FakeClock(5e8)
    retention = Retention(WEEK_S, wall=wall, steady=steady, fleet=True)
    assert not retention.watch_journal(5e8, 0.0, 0.01)
    steady.advance(60)
    wall.advance(60)
    # A reading that took long is dropped: its wait would read as a step.
    assert not retention.watch_journal(5e8 + 60 - 30 * DAY_S, 30.0, 60.0)
    assert retention.watch_journal(5e8 + 60 - 30 * DAY_S, 60.0, 60.05)
    assert retention.steps == 1
    assert retention.prune_now() is None
    assert not Retention(WEEK_S).watch_journal(0.0, 0.0, 0.0)  # no fleet: no journal clock


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("before", "after"),
    [(0.0, 8 * DAY_S), (-30 * DAY_S, 30 * DAY_S)],
    ids=["forward-8-days", "back-30-days-then-right"],
)
async def test_a_wall_clock_step_prunes_no_finished_job(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, before: float, after: float
) -> None:
    wall = SteppedWall()
    svc = Service.build(settings_for(tmp_path), CollectorRegistry(), wall_clock=wall)
    await svc.start()
    try:
        wall.step(before)  # the job is stamped with this clock
        job, created = await svc.submit_once("nightly-1", 2, {}, 0)
        assert created
        await until_completed(svc, job.id)
        with caplog.at_level(logging.INFO, "pacer.service"):
            wall.step(after)
            await svc.commits.upkeep()  # a round after the step, whoever saw it first
        assert await svc.db(svc.journal.get_job, job.id) is not None
        assert await svc.submit_once("nightly-1", 2, {}, 0) == (
            await svc.db(svc.journal.get_job, job.id),
            False,
        )  # the retry names the job: no new one
        stepped = [r for r in caplog.records if "'s wall clock stepped" in r.getMessage()]
        assert [(r.levelno, f"stepped {after:+.1f} s" in r.getMessage()) for r in stepped] == [
            (logging.WARNING, True)
        ]
    finally:
        await svc.shutdown()


def libfaketime() -> str:
    """Debian's libfaketime, installed when missing; the test is skipped where it cannot be."""
    if ensure_debian_package("faketime", "faketime") is None:
        pytest.skip("faketime missing and Debian's faketime package cannot be installed here")
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        pytest.skip("faketime is installed but its library is not where Debian puts it")
    return found[0]


@pytest.mark.slow
def test_pacer_serve_keeps_its_finished_jobs_when_the_clock_is_set_forward(
    tmp_path: Path,
) -> None:
    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    server = ServerProcess(
        tmp_path,
        LD_PRELOAD=libfaketime(),
        FAKETIME_TIMESTAMP_FILE=str(offset),  # read again every second
        FAKETIME_CACHE_DURATION="1",
        FAKETIME_DONT_FAKE_MONOTONIC="1",
    )
    try:
        server.start()
        client = server.client
        key = {"Idempotency-Key": "nightly-2"}
        job = client.request("POST", "/v1/jobs", {"partitions": 2}, headers=key)
        wait_until(lambda: client.job(job["id"])["state"] == "completed", "the job to complete")
        offset.write_text(f"+{int(8 * DAY_S)}\n")
        wait_until(lambda: "finished jobs are not pruned for" in server.log,
                   "an upkeep round after the step")  # fmt: skip
        assert "this host's wall clock stepped +6912" in server.log
        assert client.job(job["id"])["state"] == "completed"
        again = client.request("POST", "/v1/jobs", {"partitions": 2}, headers=key)
        assert again["id"] == job["id"]
    finally:
        server.stop()
