"""Supervised tasks and the progress watchdog, on a virtual clock: failures are logged with
their traceback, counted and restarted after a backoff that doubles while they keep failing;
cancellation is not a failure; readiness names what is down or stalled."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from pacer.runtime.supervision import (
    CRASH_LOOP_FAILURES,
    Backoff,
    ProgressWatchdog,
    Supervisor,
    TaskHealth,
)
from tests.conftest import FakeClock


class FakeSleep:
    """``asyncio.sleep`` on the virtual clock: records each wait and moves the clock by it.
    While ``gate`` is clear the sleeper waits there (the test looks at the task while down)."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.waits: list[float] = []
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.entered.set()
        await self.gate.wait()
        self.clock.advance(seconds)


class Flaky:
    """A task body that raises on its first ``failures`` runs, then returns."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.runs = 0

    async def __call__(self) -> None:
        self.runs += 1
        if self.runs <= self.failures:
            raise RuntimeError(f"boom {self.runs}")


def supervisor(clock: FakeClock) -> tuple[Supervisor, FakeSleep]:
    sleep = FakeSleep(clock)
    return Supervisor(clock, Backoff(0.1, 30.0, 60.0), sleep), sleep


# -- Backoff and TaskHealth (pure) -----------------------------------------------------------


def test_backoff_doubles_from_the_first_wait_up_to_the_cap() -> None:
    backoff = Backoff(initial_s=0.1, max_s=1.0)
    assert [backoff.delay_s(n) for n in range(1, 7)] == pytest.approx(
        [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    )
    assert backoff.delay_s(5000) == 1.0  # no overflow far past the cap


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial_s": 0.0}, "initial_s must be greater than 0, got 0.0"),
        ({"initial_s": 2.0, "max_s": 1.0}, r"max_s \(1.0\) must be at least initial_s \(2.0\)"),
        ({"healthy_after_s": -1.0}, "healthy_after_s must be at least 0, got -1.0"),
    ],
    ids=["no-wait", "cap-below-first", "negative-healthy"],
)
def test_backoff_refuses_what_cannot_work(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Backoff(**kwargs)


def test_a_task_is_down_from_its_failure_to_its_restart() -> None:
    backoff = Backoff(0.1, 30.0, 60.0)
    health = TaskHealth("dispatch")
    health.started(0.0)
    assert health.reason(5.0, backoff) is None
    assert health.crashed(5.0, RuntimeError("boom"), backoff) == 0.1
    assert health.reason(5.0, backoff) == (
        "task dispatch down after RuntimeError('boom'): restarting in 0.1 s (1 in a row)"
    )
    health.started(5.1)
    assert health.reason(5.1, backoff) is None  # one failure is not a crash loop


def test_failures_in_a_row_are_a_crash_loop_until_the_task_runs_healthy() -> None:
    backoff = Backoff(0.1, 30.0, 60.0)
    health = TaskHealth("journal")
    now = 0.0
    for _ in range(CRASH_LOOP_FAILURES):
        health.started(now)
        now += 1.0
        now += health.crashed(now, OSError("disk full"), backoff)
    health.started(now)
    assert health.reason(now + 59.0, backoff) == (
        "task journal crash-looping: 3 failures in a row, the last OSError('disk full')"
    )
    assert health.reason(now + 60.0, backoff) is None  # ran healthy: ready again


def test_a_failure_after_a_healthy_run_starts_the_backoff_over() -> None:
    backoff = Backoff(0.1, 30.0, 60.0)
    health = TaskHealth("upkeep")
    health.started(0.0)
    assert health.crashed(1.0, ValueError("x"), backoff) == 0.1
    health.started(1.1)
    assert health.crashed(2.0, ValueError("x"), backoff) == 0.2  # in a row: doubled
    health.started(2.2)
    assert health.crashed(62.2, ValueError("x"), backoff) == 0.1  # after 60 s healthy
    assert (health.failures, health.in_a_row) == (3, 1)


# -- Supervisor ------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_failure_is_logged_with_its_traceback_counted_and_restarted_after_backoff(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    sup, sleep = supervisor(clock)
    body = Flaky(failures=1)
    with caplog.at_level(logging.INFO, logger="pacer.runtime.supervision"):
        await sup.start("dispatch", body)
    assert body.runs == 2  # ran again, then returned
    assert sleep.waits == [0.1]
    assert sup.failures() == {"dispatch": 1}
    [failed] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert failed.getMessage() == "task dispatch failed (1 in a row); restarting in 0.1 s"
    assert failed.exc_info is not None
    assert repr(failed.exc_info[1]) == "RuntimeError('boom 1')"
    assert "raise RuntimeError" in caplog.text  # the traceback
    assert failed.__dict__["task"] == "dispatch"  # the log line's context
    assert sup.reasons() == []


@pytest.mark.asyncio
async def test_readiness_names_the_task_while_it_is_down(clock: FakeClock) -> None:
    sup, sleep = supervisor(clock)
    sleep.gate.clear()
    task = sup.start("journal", Flaky(failures=1))
    await asyncio.wait_for(sleep.entered.wait(), 5)
    assert sup.reasons() == [
        "task journal down after RuntimeError('boom 1'): restarting in 0.1 s (1 in a row)"
    ]
    sleep.gate.set()
    await task
    assert sup.reasons() == []


@pytest.mark.asyncio
async def test_a_crash_loop_keeps_backing_off_and_stays_unready(clock: FakeClock) -> None:
    sup, sleep = supervisor(clock)
    looping = asyncio.Event()
    runs = 0

    async def body() -> None:
        nonlocal runs
        runs += 1
        if runs <= 10:
            raise RuntimeError("again")
        looping.set()
        await asyncio.Event().wait()  # runs until cancelled

    task = sup.start("dispatch", body)
    await asyncio.wait_for(looping.wait(), 5)
    assert sleep.waits == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0])
    assert sup.failures() == {"dispatch": 10}
    [reason] = sup.reasons()  # running again, but not yet for long
    assert reason.startswith("task dispatch crash-looping: 10 failures in a row")
    clock.advance(60.0)
    assert sup.reasons() == []
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.asyncio
async def test_cancellation_is_not_a_failure(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    sup, sleep = supervisor(clock)
    started = asyncio.Event()

    async def body() -> None:
        started.set()
        await asyncio.Event().wait()

    task = sup.start("upkeep", body)
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sup.failures() == {"upkeep": 0}
    assert sleep.waits == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert sup.reasons() == []


@pytest.mark.asyncio
async def test_stop_ends_a_wait_to_restart_without_restarting(clock: FakeClock) -> None:
    sup, sleep = supervisor(clock)
    sleep.gate.clear()
    body = Flaky(failures=1)
    task = sup.start("dispatch", body)
    await asyncio.wait_for(sleep.entered.wait(), 5)
    sup.stop()
    await task  # returns: shutting down is not an error
    assert body.runs == 1
    assert sup.reasons() == []


@pytest.mark.asyncio
async def test_a_failure_while_stopping_is_counted_but_not_restarted(clock: FakeClock) -> None:
    sup, sleep = supervisor(clock)
    sup.stop()
    body = Flaky(failures=5)
    await sup.start("journal", body)
    assert (body.runs, sup.failures(), sleep.waits) == (1, {"journal": 1}, [])


@pytest.mark.asyncio
async def test_a_name_is_supervised_once(clock: FakeClock) -> None:
    sup, _ = supervisor(clock)
    await sup.start("dispatch", Flaky(failures=0))
    with pytest.raises(ValueError, match="a task named 'dispatch' is already supervised"):
        sup.start("dispatch", Flaky(failures=0))


def test_failures_reported_from_threads_are_logged_and_counted(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    sup = Supervisor(clock)
    sup.expect("prove-0", "prove-1")

    def crash() -> None:
        try:
            raise MemoryError("device out of memory")
        except MemoryError as exc:
            sup.record_failure("prove-1", exc)

    threads = [threading.Thread(target=crash) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sup.failures() == {"prove-0": 0, "prove-1": 4}
    record = caplog.records[0]
    assert record.getMessage() == "prove-1 failed: MemoryError('device out of memory')"
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
    assert record.__dict__["task"] == "prove-1"
    assert sup.reasons() == []  # a thread's failure alone says nothing of readiness


# -- ProgressWatchdog ------------------------------------------------------------------------


class Work:
    """Whether work waits, as the service would say."""

    def __init__(self) -> None:
        self.waiting = False

    def __call__(self) -> bool:
        return self.waiting


def test_work_waiting_without_progress_stalls_after_the_limit(clock: FakeClock) -> None:
    work = Work()
    dog = ProgressWatchdog(300.0, work, clock)
    work.waiting = True
    dog.observe()
    clock.advance(299.9)
    assert (dog.stalled(), dog.reasons()) == (False, [])
    clock.advance(0.1)
    assert dog.stalled()
    assert dog.reasons() == ["stalled: work waiting and no progress for 300.0 s (limit 300 s)"]
    dog.progress()
    assert (dog.stalled(), dog.stalled_s()) == (False, 0.0)
    clock.advance(299.0)
    assert not dog.stalled()  # counted from the last progress


def test_an_idle_service_is_not_stalled_and_new_work_starts_the_clock(clock: FakeClock) -> None:
    work = Work()
    dog = ProgressWatchdog(300.0, work, clock)
    clock.advance(3600.0)  # an hour with nothing to do
    assert (dog.stalled(), dog.stalled_s()) == (False, 0.0)
    assert dog.since_progress_s() == 3600.0
    dog.observe()  # as the service does before adding work ...
    work.waiting = True
    dog.observe()  # ... and after
    clock.advance(10.0)
    assert dog.stalled_s() == 10.0  # not an hour and ten seconds


def test_work_finishing_unobserved_does_not_carry_over_to_the_next_job(clock: FakeClock) -> None:
    work = Work()
    dog = ProgressWatchdog(300.0, work, clock)
    work.waiting = True
    dog.observe()
    clock.advance(5.0)
    dog.progress()
    work.waiting = False  # the last result committed; nobody looked
    clock.advance(1000.0)
    dog.observe()
    work.waiting = True
    dog.observe()
    assert not dog.stalled()


def test_a_limit_of_zero_never_stalls(clock: FakeClock) -> None:
    work = Work()
    work.waiting = True
    dog = ProgressWatchdog(0.0, work, clock)
    dog.observe()
    clock.advance(1e6)
    assert (dog.stalled(), dog.reasons()) == (False, [])


def test_a_negative_limit_is_refused(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match=r"stall_s must be at least 0 \(0: never stalled\)"):
        ProgressWatchdog(-1.0, Work(), clock)
