"""A stop while a journal call hangs (`pacer.service.stopping`): the last commit waits out what
is left of the drain budget, at least PACER_SHUTDOWN__JOURNAL_S, the journal's close that long
again, and a signal ends either wait at once; then the journal is left: one error names the
call, how long it has run and what was not committed, the workload is still closed, and the
journal's lock is given up once the call returns (or with the process). What was not committed
is proved at the next start.

In process, on a real SQLite file whose calls hang on an Event the test holds, the stop's
waits on the virtual clock; and `pacer serve` as a real process, its commit stuck on a lock
another connection holds, stopped by SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from pacer.journal import JournalLock
from pacer.journal.health import Backoff, JournalLeft
from pacer.journal.lock import held_by
from pacer.server import Server
from pacer.service.journal_access import JournalAccess
from pacer.service.lifecycle import Service
from pacer.service.stopping import JournalStop
from tests.conftest import FakeClock
from tests.pipeline.virtual_time import VirtualTimers
from tests.servers import ServerFactory, ServerProcess, settings_for, until_completed
from tests.service.test_journal_hang import GAUGE, hanging, hanging_service
from tests.service.test_process import completions_in, job_states
from tests.waits import until, wait_until

BOUNDS = {"PACER_SHUTDOWN__DRAIN_S": "5", "PACER_SHUTDOWN__JOURNAL_S": "10"}
WAITS_ON_LOCKS = {"PACER_JOURNAL__BUSY_TIMEOUT_S": "600", "PACER_JOURNAL__STALL_S": "601"}
"""A journal call waiting on another program's lock neither returns nor fails within a test."""
STOP_ERROR = "stopping without journal "
NOTHING_LEFT = "nothing proved is left uncommitted"


def stop_error(svc: Server, call: str, ran_s: float, why: str, left: str = NOTHING_LEFT) -> str:
    """The one error of a stop that left the journal, ``call`` hung on its thread."""
    path = svc.service.settings.journal.path
    return (f"{STOP_ERROR}{path}: journal call {call} has run {ran_s:.1f} "
            f"s on pacer-journal-0 without returning, and {why}; {left}; the stop is not clean "
            "(exit status 1)")  # fmt: skip


def stop_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The errors logged, but for the hung call's own report (`JournalAccess.check_calls`)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and not r.getMessage().startswith("journal call ")
    ]


def lock_free(path: Path) -> bool:
    # Not by taking it: a descriptor of the file closed here would drop the locks of this
    # process's own SQLite connections to it.
    return held_by(path) is None


def holds_a_lock(pid: int, *paths: Path) -> bool:
    """Whether process ``pid`` holds a flock on one of ``paths`` (read from /proc/locks,
    without taking any lock)."""
    inodes = set()
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            stat = path.stat()
            inodes.add(f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}")
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 00:2a:1234 0 EOF" (a blocked waiter's has "->")
        held = "->" not in fields and fields[1] == "FLOCK" and fields[4] == str(pid)
        if held and fields[5] in inodes:
            return True
    return False


def commit_running_s(server: ServerProcess) -> float:
    """How long the journal call running in ``server`` has run (its gauge), 0 when none runs."""
    found = re.search(rf"^{GAUGE} (\S+)$", server.metrics_text(), re.MULTILINE)
    return float(found.group(1)) if found else 0.0


@contextlib.contextmanager
def commit_held(server: ServerProcess, journal: Path) -> Iterator[None]:
    """Another program holds ``journal``'s lock (``server`` started with `WAITS_ON_LOCKS`) until
    the end of the block, entered once one of ``server``'s commits waits on it."""
    with closing(sqlite3.connect(journal, isolation_level=None)) as outside:
        outside.execute("BEGIN EXCLUSIVE")
        wait_until(lambda: commit_running_s(server) > 0.3, "a commit to wait on the lock")
        yield
        outside.execute("ROLLBACK")


def on_virtual_time(svc: Server, clock: FakeClock) -> VirtualTimers:
    timers = VirtualTimers(clock)
    svc.service.journal_stop = JournalStop(svc.service.journal_access, clock, timers)
    return timers


async def proved_again(tmp_path: Path, job_id: str, partitions: int) -> None:
    """A restart on the journal completes the job, every partition once."""
    svc = Server(Service.build(settings_for(tmp_path), CollectorRegistry()))
    await svc.start()
    try:
        await until_completed(svc.service, job_id)
        job = await svc.service.db(svc.service.journal.get_job, job_id)
        assert job is not None
        assert job.partitions_done == partitions
    finally:
        await svc.shutdown()


@pytest.mark.slow
@pytest.mark.asyncio
@pytest.mark.parametrize("hurried", [False, True], ids=["sigterm", "second-signal-in-the-drain"])
async def test_a_stop_leaves_a_hung_commit_at_its_bound_and_the_next_start_proves_it(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture, hurried: bool
) -> None:
    caplog.set_level(logging.INFO, "pacer.service")
    svc = await hanging_service(tmp_path, clock, "complete_partitions", **BOUNDS)
    timers = on_virtual_time(svc, clock)
    await svc.start()
    journal = hanging(svc)
    closed: list[str] = []
    close = svc.service.workload.close

    def recorded_close() -> None:
        closed.append("workload")
        close()

    svc.service.workload.close = recorded_close  # type: ignore[method-assign]
    try:
        journal.hang.set()
        job = await svc.service.submit(4, {}, 0)
        await until(
            lambda: journal.hung.is_set() and svc.service.pipeline.idle, "the commit to hang"
        )
        clock.advance(31.0)
        if hurried:  # the drain is cut short; the commit still gets its one attempt, bounded
            svc.service.hurry()
        stop = asyncio.ensure_future(svc.shutdown())
        await until(lambda: timers.parked == 1, "the stop to wait for the journal")
        timers.advance(9.9)
        assert timers.parked == 1
        assert not stop.done()
        timers.advance(0.1)
        assert await asyncio.wait_for(stop, 10) or hurried  # drained, unless cut short
    finally:
        journal.fail = True  # the disk fails at last: the batch it held is not committed
        journal.release.set()

    waited = ("the stop waited 10.0 s for the last commit (the drain budget left, at least "
              "PACER_SHUTDOWN__JOURNAL_S)")  # fmt: skip
    left = ("4 results and 0 failed attempts not committed stay pending there and are proved "
            "again on the next start")  # fmt: skip
    assert stop_errors(caplog) == [stop_error(svc, "_commit", 41.0, waited, left)]
    assert svc.service.journal_access.left
    assert svc.service.uncommitted() == 4
    assert closed == ["workload"]  # closed in order all the same (a pool kept or freed)
    assert svc.service.health.failures == 0  # nothing failed: the call hangs
    assert svc.service.registry.get_sample_value("pacer_journal_commit_failures_total") == 0.0
    # The close, queued behind the call, runs once it returns, and gives the lock up.
    await until(
        lambda: lock_free(svc.service.settings.journal.path), "the journal's lock to be free"
    )
    await proved_again(tmp_path, job.id, 4)


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_signal_ends_the_stops_wait_for_a_hung_journal_at_once(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "pacer.service")
    env = {"PACER_SHUTDOWN__DRAIN_S": "0", "PACER_SHUTDOWN__JOURNAL_S": "600"}  # real time
    svc = await hanging_service(tmp_path, clock, "check_file", **env)
    await svc.start()
    journal = hanging(svc)
    try:
        journal.hang.set()
        await until(journal.hung.is_set, "the commit loop's check_file to hang")
        clock.advance(31.0)
        stop = asyncio.ensure_future(svc.shutdown())
        waiting = (
            "stopping: journal call check_file has run 31.0 s without returning; the stop "
            "waits at most 600.0 s more for the journal (another signal: not at all)"
        )
        await until(lambda: waiting in caplog.messages, "the stop to say what it waits for")
        svc.service.hurry()
        assert await asyncio.wait_for(stop, 10)
    finally:
        journal.release.set()
    cut = "a signal cut the stop's wait short"
    assert stop_errors(caplog) == [stop_error(svc, "check_file", 31.0, cut)]


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_close_that_hangs_is_waited_for_its_own_bound(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    svc = await hanging_service(tmp_path, clock, "close", **BOUNDS)
    timers = on_virtual_time(svc, clock)
    await svc.start()
    journal = hanging(svc)
    try:
        job = await svc.service.submit(2, {}, 0)
        await until_completed(svc.service, job.id)
        journal.hang.set()
        stop = asyncio.ensure_future(svc.shutdown())
        await until(lambda: journal.hung.is_set() and timers.parked == 1, "the close to hang")
        timers.advance(10.0)
        assert await asyncio.wait_for(stop, 10)
    finally:
        journal.release.set()
    waited = "the stop waited 10.0 s for the journal's close (PACER_SHUTDOWN__JOURNAL_S)"
    assert stop_errors(caplog) == [stop_error(svc, "close", 10.0, waited)]
    await until(
        lambda: lock_free(svc.service.settings.journal.path), "the journal's lock to be free"
    )


@pytest.mark.asyncio
async def test_leaving_the_journal_ends_every_wait_drops_what_has_not_begun_refuses_more(
    tmp_path: Path,
) -> None:
    settings = settings_for(tmp_path).journal
    access = JournalAccess(settings, time.monotonic, Backoff(), JournalLock(settings.sqlite_path))
    await access.open()
    entered, release, ran = threading.Event(), threading.Event(), []

    def hang() -> None:
        entered.set()
        release.wait(30)
        ran.append("hang")

    try:
        hung = asyncio.ensure_future(access.run(hang))
        queued = asyncio.ensure_future(access.run(ran.append, "queued"))
        await until(entered.is_set, "the call to hang")
        [(call, _)] = access.leave()
        assert (call.name, call.thread) == ("hang", "pacer-journal-0")
        for waiting in (hung, queued):
            with pytest.raises(JournalLeft, match="not waited for, the service stops"):
                await waiting
        with pytest.raises(JournalLeft):
            await access.run(ran.append, "later")
        assert await access.read_unless_stalled(len, ran) is None
        access.failed(JournalLeft("left"), "committing")
        assert access.health.healthy
        assert access.health.failures == 0
        await access.close()  # not waited for: it runs after the hung call
        assert not lock_free(settings.sqlite_path)
    finally:
        release.set()
    await until(lambda: lock_free(settings.sqlite_path), "the journal's lock to be free")
    assert ran == ["hang"]  # nothing queued ran, nothing was queued after


def test_sigterm_ends_a_stop_held_by_a_hung_commit_within_its_bound_exiting_1(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    # A commit stuck on a lock another program holds: with a busy timeout of 600 s it neither
    # returns nor fails within the test. SIGTERM: the drain (0.5 s), the last commit's wait
    # (1 s), then the process ends; the lock on the journal goes with it.
    env = {"PACER_NTT__LOG_N": "12", "PACER_JOURNAL__COMMIT_INTERVAL_S": "0.01",
           "PACER_SHUTDOWN__DRAIN_S": "0.5", "PACER_SHUTDOWN__JOURNAL_S": "1"}  # fmt: skip
    first = server_factory(**env, **WAITS_ON_LOCKS).start()
    journal = tmp_path / "journal.sqlite"
    job_id = first.client.submit(100)
    with commit_held(first, journal):
        began = time.monotonic()
        first.signal(signal.SIGTERM)
        assert first.wait(30) == 1
        assert time.monotonic() - began < 0.5 + 1 + 15  # the bounds, not the lock's 600 s
    [line] = [line for line in first.log.splitlines() if STOP_ERROR in line]
    assert " ERROR pacer.service " in line
    hung = (r"journal call _commit has run [\d.]+ s on pacer-journal-0 without returning, and "
            r"the stop waited [\d.]+ s for the last commit")  # fmt: skip
    assert re.search(hung, line), line
    uncommitted = re.search(r"(\d+) results and 0 failed attempts not committed", line)
    assert uncommitted is not None, line
    assert int(uncommitted.group(1)) > 0, line
    assert first.log.rstrip().endswith("stopped")
    assert job_states(journal)[job_id] in ("queued", "running")

    second = server_factory(**env).start()  # the lock went with the process
    wait_until(lambda: job_states(journal)[job_id] == "completed", "the job to complete")
    job = second.client.job(job_id)
    assert [p["index"] for p in job["partition_results"]] == list(range(100))
    second.signal(signal.SIGTERM)
    assert second.wait() == 0
    # Read once stopped: the job's log line follows its commit, which the journal shows first.
    assert completions_in(first.log) + completions_in(second.log) == {job_id: 1}


def test_sigterm_before_ready_gives_up_a_start_held_by_a_journal_that_does_not_answer(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    # The journal's open waits on a lock another program holds (600 s): the start never ends
    # by itself, and a stop must not wait for it.
    journal = tmp_path / "journal.sqlite"
    with closing(sqlite3.connect(journal, isolation_level=None)) as outside:
        outside.execute("BEGIN EXCLUSIVE")
        server = server_factory(**WAITS_ON_LOCKS).launch()
        # Watched without taking the lock: a probe that took it for a moment could meet the
        # start's own attempt, which would then refuse to start.
        lock_files = (journal, JournalLock(journal).path)
        proc = server.proc
        assert proc is not None
        wait_until(lambda: proc.poll() is not None or holds_a_lock(proc.pid, *lock_files),
                   "the first steps to take the journal's lock")  # fmt: skip
        assert proc.poll() is None, server.log
        wait_until(lambda: "listening on http" in server.log, "the API to listen, then open")
        began = time.monotonic()
        server.signal(signal.SIGTERM)
        assert server.wait(30) == 0, server.log
        assert time.monotonic() - began < 10
        outside.execute("ROLLBACK")
    assert "stopping before ready: the start is given up while it waits for open" in server.log
    assert lock_free(journal)
