"""The service's way to the journal: its lock, the thread it runs on, its health, and what waits
in memory to be written to it.

Nothing happens on construction; `JournalAccess.open` takes the lock (one service per journal:
a second one would resume and prove the same jobs) and opens the file on the journal's own
thread, where every call runs after it (an fsync must never stall the event loop). A fleet's
journal (PostgreSQL) has no file to lock: the host's name is held in the database instead (one
pacer per name), once the journal is open.

A call that never returns raises nothing: each call reports to ``calls`` (`JournalCalls`) as it
begins and ends on its thread, and one past ``PACER_JOURNAL__STALL_S`` makes the service unready
(`JournalAccess.reasons`) and is logged once, as an error, by the watch (`JournalAccess.start`)
or whichever reads it first; if it returns, how long it took is logged too.

A stop waits for such a call only so long (`pacer.service.stopping`), then `leave`s the
journal: whatever awaits a call ends at once with ``JournalLeft``, later calls are refused,
calls not begun are dropped, and the one running is left to its thread, a daemon that does
not hold the process's exit. The journal's close then runs after that call, if it ever
returns, and gives the lock up; else the kernel releases the lock as the process ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from pacer.config import JournalSettings
from pacer.control.estimates import Estimates
from pacer.journal import (
    FleetBackend,
    JournalBackend,
    JournalLock,
    PartitionResult,
    open_fleet_journal,
    open_journal,
)
from pacer.journal.health import (
    Backoff,
    JournalCalls,
    JournalHealth,
    JournalLeft,
    JournalUnavailable,
    RunningCall,
)
from pacer.runtime.supervision import Supervisor
from pacer.runtime.threads import DaemonPool
from pacer.service.assembly import saved_estimates

log = logging.getLogger("pacer.service")
T = TypeVar("T")
WATCH_MAX_S = 1.0  # the watch looks for stalled calls this often, or at 1/10 of the limit
READS_QUEUED = 2  # reads for the API on the journal's thread at once: a write waits behind these


@dataclass(frozen=True)
class FailedAttempt:
    """A failed attempt of a partition, waiting to be journaled."""

    reason: str
    gpu: int | None


class JournalAccess:
    """The journal ``settings`` name on a thread of its own, once `open`.

    ``pending``: results proved but not committed, in order (the first ``committing`` of them
    in the commit running now); ``failures``: failed attempts to journal, by (job, partition),
    oldest first. Both wait here while the journal fails;
    ``backoff`` paces the retries of writes that fail, and ``health`` says since when;
    ``calls`` holds the call running on each journal thread, and since when; ``left``, whether
    a stop has stopped waiting for them (`leave`). ``wall`` stamps an SQLite journal's jobs."""

    def __init__(
        self,
        settings: JournalSettings,
        clock: Callable[[], float],
        backoff: Backoff,
        lock: JournalLock | None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.wall = wall  # the SQLite journal's clock
        self.backoff = backoff
        self.health = JournalHealth(clock)
        self.calls = JournalCalls(clock, settings.stall_s)
        self.pending: list[PartitionResult] = []
        self.committing = 0
        self.failures: dict[tuple[str, int], list[FailedAttempt]] = {}
        # The SQLite journal's lock, None for a fleet's (`pacer.service.first_steps` makes it,
        # and takes it before the pool); `open` takes it where they did not, `close` gives it up.
        self._lock = lock
        self._thread: DaemonPool | None = None
        self._journal: JournalBackend | None = None
        self._fleet: FleetBackend | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._waiting: set[asyncio.Future[Any]] = set()  # calls awaited now, on any thread
        self._closing: Future[None] | None = None  # the journal's close, once asked for
        self._left = asyncio.Event()
        self._reads = asyncio.Semaphore(READS_QUEUED)

    @property
    def journal(self) -> JournalBackend:
        """The open journal; RuntimeError before `open`."""
        if self._journal is None:
            raise RuntimeError("the journal is not open: open() the service first")
        return self._journal

    @journal.setter
    def journal(self, journal: JournalBackend) -> None:
        self._journal = journal

    @property
    def fleet_journal(self) -> FleetBackend:
        """The open journal of a fleet; RuntimeError for an SQLite one, or before `open`."""
        if self._fleet is None:
            raise RuntimeError("the journal is not a fleet's: PACER_JOURNAL__URL is no database")
        return self._fleet

    @property
    def fleet(self) -> FleetBackend | None:
        """The open journal if it is a fleet's; None for an SQLite one, or before `open`."""
        return self._fleet

    async def open(self) -> None:
        """Take the journal's lock (``JournalInUseError`` naming the holder if another
        service has it), then open the journal the settings name (`open_journal`) on the
        journal's thread; a fleet's journal, then take the host's name in it
        (``HostInUseError`` naming the holder). ``JournalUnavailable`` when a database
        cannot be reached, or the file cannot be locked or opened now."""
        taken = self._lock is not None and not self._lock.held
        if self._lock is not None:
            try:
                self._lock.acquire()
            except OSError as exc:  # the file cannot be made or opened now
                raise JournalUnavailable(f"journal {self.settings.location}: {exc}") from exc
        self._thread = DaemonPool(1, "pacer-journal")
        try:
            self._journal = await self._open()
        except BaseException:
            self._thread.shutdown()
            self._thread = None
            # Given back only if taken here: the start's first steps keep theirs until the
            # service closes, after a pool they began pinning is closed.
            if taken and self._lock is not None:
                self._lock.release()
            raise

    async def _open(self) -> JournalBackend:
        assert self._thread is not None
        if not self.settings.fleet:
            return await self._submit(self._thread, open_journal, self.settings, self.wall)
        fleet = await self._submit(self._thread, open_fleet_journal, self.settings)
        try:
            await self._submit(self._thread, fleet.hold_host)
        except fleet.OperationalError as exc:
            fleet.close()
            raise JournalUnavailable(f"journal {self.settings.location}: {exc}") from exc
        except BaseException:
            fleet.close()
            raise
        self._fleet = fleet
        return fleet

    async def retried(self, doing: str, step: Callable[[], Awaitable[T]]) -> T:
        """``step`` of a start, tried again with ``backoff`` for as long as the journal is
        unavailable (a database out of reach, a disk full, read-only or failing): a fault a
        restart would not mend. Meanwhile ``health`` says why (readiness), and the failures
        are logged as a failing write's are; the recovery too."""
        failures = 0
        while True:
            try:
                result = await step()
            except JournalUnavailable as exc:
                if isinstance(exc, JournalLeft):
                    raise
                failures += 1
                self.failed(exc, doing)
                await self.sleep(self.backoff.delay_s(failures))
                continue
            if failures:
                self.succeeded()
            return result

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        """Run a journal call on the journal's thread. ``JournalUnavailable`` when the journal
        cannot do it now (locked, disk full, I/O error, the server out of reach: its
        ``OperationalError``); ``JournalLeft`` once a stop has `leave`n it."""
        if self._thread is None:
            raise RuntimeError("the journal is not open: open() the service first")
        return await self.run_on(self._thread, call, *args)

    async def run_on(self, thread: DaemonPool, call: Callable[..., T], *args: Any) -> T:
        """`run` on another ``thread`` (a fleet's claims and leases have their own)."""
        if self._journal is None:
            raise RuntimeError("the journal is not open: open() the service first")
        if self.left:
            raise self._left_error()
        try:
            return await self._await(self._submit(thread, call, *args))
        except self._journal.OperationalError as exc:
            raise JournalUnavailable(f"journal {self.settings.location}: {exc}") from exc

    async def read(self, call: Callable[..., T], *args: Any) -> T:
        """`run` a read for the API; the rest wait here, not on the thread (D144)."""
        async with self._reads:
            return await self.run(call, *args)

    async def read_unless_stalled(self, call: Callable[..., T], *args: Any) -> T | None:
        """`run` a read for an answer that must come even while the journal hangs (the
        status): None at once while a call has run past ``PACER_JOURNAL__STALL_S``, or once
        this one has waited that long."""
        if self.reasons() or self.left:
            return None
        try:
            return await asyncio.wait_for(self.read(call, *args), self.settings.stall_s)
        except (TimeoutError, JournalLeft):
            return None

    def _submit(self, thread: DaemonPool, call: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``call(*args)`` on ``thread``: cancelling the future drops the call if not begun."""
        return asyncio.wrap_future(thread.submit(self._timed, call, *args))

    async def _await(self, waiter: asyncio.Future[T]) -> T:
        """``waiter``'s result, or ``JournalLeft`` at once after `leave`, or should it be called
        meanwhile (``waiter`` is then cancelled)."""
        if self.left:
            waiter.cancel()
            raise self._left_error()
        self._waiting.add(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self.left and waiter.cancelled() and not (task is not None and task.cancelling()):
                raise self._left_error() from None
            raise
        finally:
            self._waiting.discard(waiter)

    def _timed(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)``, on a journal thread, reported to ``calls`` as it begins and ends."""
        name = getattr(call, "__name__", type(call).__name__)
        self.calls.began(name)
        try:
            return call(*args)
        finally:
            late = self.calls.ended()
            if late is not None:
                ran_s, reported = late
                if reported:
                    log.info("journal call %s returned after %.1f s", name, ran_s)
                else:
                    self._log_stall(name, ran_s, returned=True)

    # -- calls that hang ------------------------------------------------------------------------

    def reasons(self) -> list[str]:
        """The readiness source's answer: each journal call past ``PACER_JOURNAL__STALL_S``
        (logged once, if the watch has not yet)."""
        self.check_calls()
        return self.calls.reasons()

    def check_calls(self) -> None:
        """Log each call that has newly run past ``PACER_JOURNAL__STALL_S``."""
        for call, running_s in self.calls.stalled():
            self._log_stall(call.name, running_s, returned=False)

    def start(self, supervisor: Supervisor) -> None:
        """Watch for calls that hang (task ``journal-watch``) until `close`."""
        self._watcher = supervisor.start("journal-watch", self._watch_loop)

    async def _watch_loop(self) -> None:
        """Look for stalled calls (`check_calls`) every 1/10 of the limit, at most a second
        apart: a hung call is logged although nothing asks."""
        while True:
            await asyncio.sleep(min(self.settings.stall_s / 10, WATCH_MAX_S))
            self.check_calls()

    def _log_stall(self, name: str, ran_s: float, returned: bool) -> None:
        log.error(
            "journal call %s %s %.1f s (more than PACER_JOURNAL__STALL_S=%g s) on journal %s: "
            "the calls behind it on its thread %s for it (a hung disk or mount, a database "
            "that does not answer?)",
            name, "took" if returned else "running for", ran_s, self.settings.stall_s,
            self.settings.location, "waited" if returned else "wait",
        )  # fmt: skip

    # -- the end ------------------------------------------------------------------------------

    @property
    def left(self) -> bool:
        """Whether a stop has stopped waiting for the journal (`leave`)."""
        return self._left.is_set()

    def leave(self) -> list[tuple[RunningCall, float]]:
        """Wait for the journal no more (a stop past its bound, or cut short by a signal):
        every call awaited now ends with ``JournalLeft`` (one not begun is dropped), and so
        does every later one, at once. The calls still running, left to their threads, with
        how long they have run (s), the longest first."""
        self._left.set()
        for waiter in list(self._waiting):
            waiter.cancel()
        return self.calls.running()

    def _left_error(self) -> JournalLeft:
        return JournalLeft(f"journal {self.settings.location}: not waited for, the service stops")

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, or until `leave` is called."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._left.wait(), seconds)

    async def close(self) -> None:
        """Close the journal, then give its lock up; what is not open is left as it is. After
        `leave`, or should it be called meanwhile, the close is not waited for: it runs on the
        journal's thread after the call running there, and gives the lock up then."""
        thread, self._thread = self._thread, None
        try:
            if thread is None:  # not open: the lock alone, unless a close left to run gives it
                if self._lock is not None and self._closing is None:
                    self._lock.release()
            elif self._journal is None:
                self._closed(thread)
            else:
                self._closing = closing = thread.submit(self._timed, self._journal.close)
                closing.add_done_callback(lambda _: self._closed(thread))
                with contextlib.suppress(JournalLeft):
                    await self._await(asyncio.shield(asyncio.wrap_future(closing)))
        except Exception as exc:
            log.warning("closing the journal: %s", exc)
        finally:
            if self._watcher is not None:
                self._watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._watcher
                self._watcher = None

    def _closed(self, thread: DaemonPool) -> None:
        """The journal is closed: its thread ends and its lock is given up (on the journal's
        thread, where the close ran)."""
        thread.shutdown()
        if self._lock is not None:
            self._lock.release()

    async def saved_estimates(self, key: str) -> Estimates | None:
        """The estimates the journal holds, if they were saved under ``key`` (this host's and
        workload's); others describe another regime, and a cold start is better. None too
        where the journal cannot be read now: a cold start, rather than no start."""
        try:
            saved = await self.run(self.journal.load_estimates)
            saved_key = await self.run(self.journal.load_estimates_key)
        except JournalUnavailable as exc:
            log.warning("saved estimates not read (%s): the controller starts cold", exc)
            return None
        if saved is None:
            return None
        if saved_key != key:
            log.info(
                "saved estimates not used: saved for %s, this start is %s",
                saved_key or "an unrecorded workload", key,
            )  # fmt: skip
            return None
        return saved_estimates(saved)

    def failed(self, exc: BaseException, doing: str) -> None:
        """Count a failed journal write, and log it when it starts a failing spell (with the
        exception), changes error, or has been repeating quietly for a while."""
        if isinstance(exc, JournalLeft):  # no failure: the stop names the call that hangs
            return
        error = str(exc) or type(exc).__name__
        if not self.health.failed(error):
            return
        attempts = sum(map(len, self.failures.values()))
        waiting = f"{len(self.pending)} results and {attempts} failed attempts"
        if self.health.failures_in_spell == 1:
            log.error("journal write failed while %s: %s; %s wait in memory, retrying",
                      doing, error, waiting, exc_info=exc)  # fmt: skip
        else:
            log.error(
                "journal still failing after %d attempts over %.0f s: %s; %s wait in memory",
                self.health.failures_in_spell, self.health.failing_s(), error, waiting,
            )  # fmt: skip

    def succeeded(self) -> None:
        """A write went through: log the recovery if the journal had been failing."""
        failed_for = self.health.succeeded()
        if failed_for is not None:
            log.warning("journal recovered after %.1f s of failures", failed_for)
