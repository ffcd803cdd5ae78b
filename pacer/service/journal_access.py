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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from pacer.config import JournalSettings
from pacer.estimates import Estimates
from pacer.journal import (
    FleetBackend,
    JournalBackend,
    JournalLock,
    PartitionResult,
    open_fleet_journal,
    open_journal,
)
from pacer.journal_health import Backoff, JournalCalls, JournalHealth, JournalUnavailable
from pacer.service.assembly import saved_estimates
from pacer.supervision import Supervisor

log = logging.getLogger("pacer.service")
T = TypeVar("T")
WATCH_MAX_S = 1.0  # the watch looks for stalled calls this often, or at 1/10 of the limit


@dataclass(frozen=True)
class FailedAttempt:
    """A failed attempt of a partition, waiting to be journaled."""

    reason: str
    gpu: int | None


class JournalAccess:
    """The journal ``settings`` name on a thread of its own, once `open`.

    ``pending``: results proved but not committed, in order; ``failures``: failed attempts to
    journal, by (job, partition), oldest first. Both wait here while the journal fails;
    ``backoff`` paces the retries of writes that fail, and ``health`` says since when;
    ``calls`` holds the call running on each journal thread, and since when."""

    def __init__(
        self,
        settings: JournalSettings,
        clock: Callable[[], float],
        backoff: Backoff,
        lock: JournalLock | None,
    ) -> None:
        self.settings = settings
        self.backoff = backoff
        self.health = JournalHealth(clock)
        self.calls = JournalCalls(clock, settings.stall_s)
        self.pending: list[PartitionResult] = []
        self.failures: dict[tuple[str, int], list[FailedAttempt]] = {}
        # The SQLite journal's lock, None for a fleet's (`pacer.service.first_steps` makes it,
        # and takes it before the pool); `open` takes it where they did not, `close` gives it up.
        self._lock = lock
        self._thread: ThreadPoolExecutor | None = None
        self._journal: JournalBackend | None = None
        self._fleet: FleetBackend | None = None
        self._watcher: asyncio.Task[None] | None = None

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

    async def open(self) -> None:
        """Take the journal's lock (``JournalInUseError`` naming the holder if another
        service has it), then open the journal the settings name (`open_journal`) on the
        journal's thread; a fleet's journal, then take the host's name in it
        (``HostInUseError`` naming the holder). ``JournalUnavailable`` when a database
        cannot be reached."""
        if self._lock is not None:
            self._lock.acquire()
        self._thread = ThreadPoolExecutor(1, "pacer-journal")
        try:
            self._journal = await self._open()
        except BaseException:
            self._thread.shutdown()
            self._thread = None
            if self._lock is not None:
                self._lock.release()
            raise

    async def _open(self) -> JournalBackend:
        assert self._thread is not None
        if not self.settings.fleet:
            return await self._submit(self._thread, open_journal, self.settings, time.time)
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

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        """Run a journal call on the journal's thread. ``JournalUnavailable`` when the journal
        cannot do it now (locked, disk full, I/O error, the server out of reach: its
        ``OperationalError``)."""
        if self._thread is None:
            raise RuntimeError("the journal is not open: open() the service first")
        return await self.run_on(self._thread, call, *args)

    async def run_on(self, thread: Executor, call: Callable[..., T], *args: Any) -> T:
        """`run` on another ``thread`` (a fleet's claims and leases have their own)."""
        if self._journal is None:
            raise RuntimeError("the journal is not open: open() the service first")
        try:
            return await self._submit(thread, call, *args)
        except self._journal.OperationalError as exc:
            raise JournalUnavailable(f"journal {self.settings.location}: {exc}") from exc

    async def read_unless_stalled(self, call: Callable[..., T], *args: Any) -> T | None:
        """`run` a read for an answer that must come even while the journal hangs (the
        status): None at once while a call has run past ``PACER_JOURNAL__STALL_S``, or once
        this one has waited that long."""
        if self.reasons():
            return None
        try:
            return await asyncio.wait_for(self.run(call, *args), self.settings.stall_s)
        except TimeoutError:
            return None

    def _submit(self, thread: Executor, call: Callable[..., T], *args: Any) -> Awaitable[T]:
        return asyncio.wrap_future(thread.submit(self._timed, call, *args))

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

    async def close(self) -> None:
        """Close the journal and give its lock up; what is not open is left as it is."""
        if self._journal is not None:
            try:
                await self.run(self._journal.close)
            except Exception as exc:
                log.warning("closing the journal: %s", exc)
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        if self._thread is not None:
            self._thread.shutdown()
            self._thread = None
        if self._lock is not None:
            self._lock.release()

    async def saved_estimates(self, key: str) -> Estimates | None:
        """The estimates the journal holds, if they were saved under ``key`` (this host's and
        workload's); others describe another regime, and a cold start is better."""
        saved = await self.run(self.journal.load_estimates)
        if saved is None:
            return None
        saved_key = await self.run(self.journal.load_estimates_key)
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
