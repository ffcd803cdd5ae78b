"""A start's first steps: the work the pool's pinning must wait for, and nothing more.

Pinning the pool takes most of a cold start, so it begins as early as it can. First the
journal's lock is taken, so a second pacer on the same journal stops before it pins anything.
Then the workload is loaded and the plan is fitted to the host. The pinning then begins, and the
rest of the service is imported, opened and assembled beside it. `pacer serve` takes these
steps before it imports the HTTP server; a `Service` whose steps were not taken takes them when
it opens. With a fleet's journal the pinning waits for the journal: the host's name, held in
the database, says whether another pacer already runs as this host.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from pacer.config import Settings
from pacer.host.memory import HOST_FILES, HostFiles
from pacer.journal.lock import JournalLock
from pacer.plan import Plan, resolve
from pacer.service import resources as host
from pacer.service.startup import StartupTimes
from pacer.workload import PooledWorkload, Workload, load_workload, pooled

log = logging.getLogger("pacer.service")


class FirstSteps:
    """The journal's lock, the workload and the plan (`take`), then the workload's prepare on a
    thread of its own (`begin_prepare`: a pooled workload's pool pinned or adopted, and what it
    builds beside). ``began`` is when `take` began, on ``clock``; ``taken_s`` how long
    `take` took; ``preparing`` the prepare's future once begun (None for a workload with no
    pool), ``prepare_began`` when, ``prepare_s`` its duration once done."""

    def __init__(
        self,
        settings: Settings,
        host_files: HostFiles = HOST_FILES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.lock = None if settings.journal.fleet else JournalLock(settings.journal.sqlite_path)
        self._host_files = host_files
        self.clock = clock  # the service's clock too
        self._clock = clock
        self.began = clock()
        self.taken_s: float | None = None
        self.preparing: Future[None] | None = None
        self.prepare_began: float | None = None
        self.prepare_s: float | None = None
        self._begun = False

    @property
    def taken(self) -> bool:
        return self.taken_s is not None

    def take(self) -> None:
        """Take the journal's lock (``JournalInUseError`` naming the holder), load the
        workload and resolve the plan, fitted to the host where its memory can be read (a
        warning where that clamps the budget); the lock is given back should a later step
        fail. A lock the file system refuses now (its disk full, read-only, failing) is left
        to the journal's open, which tries again: the prepare waits for it. Once only."""
        if self.taken:
            return
        self.began = started = self._clock()
        if self.lock is not None:
            try:
                self.lock.acquire()
            except OSError as exc:
                log.warning("journal %s cannot be locked yet (%s): the pool waits for it",
                            self.lock.path, exc)  # fmt: skip
        try:
            self.workload: Workload = load_workload(self.settings)
            self.plan: Plan = self._fitted(self.workload)
        except BaseException:
            self.release()
            raise
        self.taken_s = self._clock() - started

    def _fitted(self, workload: Workload) -> Plan:
        """The plan, its budget at most what the host (or this process's cgroup) can give,
        less the reserve; as configured where /proc/meminfo cannot be read."""
        configured = resolve(self.settings, workload)
        found = host.read_host(self._host_files)
        if found is None:
            return configured
        plan = resolve(self.settings, workload, found)
        host.warn_if_clamped(configured, plan)
        return plan

    def begin_prepare(self) -> None:
        """Begin a pooled workload's prepare on a thread of its own, with the plan's slots
        (`host.prepare_pool`); nothing for a workload with no pool, or yet while the journal's
        lock is not held (a second pacer on the journal pins nothing). Once only, after
        `take`."""
        if self._begun:
            return
        if not self.taken:
            raise RuntimeError("take the first steps before the prepare: it needs the plan")
        if self.lock is not None and not self.lock.held:
            return
        self._begun = True
        workload = pooled(self.workload)
        if workload is None:
            return
        thread = ThreadPoolExecutor(1, thread_name_prefix="pacer-prepare")
        self.prepare_began = began = self._clock()
        try:
            self.preparing = thread.submit(self._prepare, workload, began)
        finally:
            thread.shutdown(wait=False)

    def _prepare(self, workload: PooledWorkload, began: float) -> None:
        try:
            host.prepare_pool(workload, self.plan, bool(self.settings.gpu.pool_slots))
        finally:
            self.prepare_s = self._clock() - began

    async def prepared(self, startup: StartupTimes) -> None:
        """Wait for the prepare begun (nothing where none was); how long it took, its parts and
        where the pool's slots came from go to ``startup``, and meanwhile (for a start's
        report) how long it has run since it began, not since this wait did."""
        preparing, workload = self.preparing, pooled(self.workload)
        if preparing is None or workload is None:
            return
        try:
            await startup.timed("prepare", asyncio.wrap_future(preparing), self._clock,
                                self.prepare_began)  # fmt: skip
        finally:
            if preparing.done():
                startup.record("prepare", self.prepare_s or 0.0, workload.prepare_phases_s)
        pool = workload.pool
        if pool is not None:
            adopted = pool.slots_adopted
            startup.pool_origin = {"adopted": adopted, "allocated": pool.slots_total - adopted}

    async def close(self, hurry: asyncio.Event, *, stuck: bool) -> None:
        """Close the workload the first steps loaded, once a prepare they began has ended
        (however it ends, unless ``hurry`` is set: a pool closed while its pinning goes on
        would leave what is pinned after); ``stuck``: calls may hang in it, so the close is
        bounded."""
        from pacer.service.stopping import ended, unless_set  # the stop's; not before the pool

        if not self.taken:
            return
        preparing = self.preparing
        if preparing is not None and not preparing.done():
            log.info("waiting for the pool's preparation to end before it is closed")
            await unless_set(hurry, ended(preparing))
        hung = preparing is not None and not preparing.done()  # hurried past it
        await host.close_workload(self.workload.close, bounded=stuck or hung)

    def keep_pool(self) -> None:
        """Leave the pinned pool for the next pacer on this host when the workload closes."""
        workload = pooled(self.workload) if self.taken else None
        if workload is None:
            log.warning("a handover was asked for, but the workload holds no pool to keep")
            return
        workload.keep_pool()

    def release(self) -> None:
        """Give the journal's lock back (the service's close does, once it has it)."""
        if self.lock is not None:
            self.lock.release()
