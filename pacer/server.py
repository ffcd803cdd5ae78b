"""``pacer serve``: the service with its HTTP API, stopped in order by signals, told to systemd.

`Server` is a `pacer.service.Service` that serves `pacer.api` once started and stops serving
after its drain, before the journal closes. `serve` runs one until SIGTERM or SIGINT, or
SIGUSR2, which also hands the pinned pool over to the next pacer (`Service.keep_pool`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys

from aiohttp import web

from pacer.api import build_runner
from pacer.config import Settings
from pacer.runtime.signals import Held, Signals, sd_notify
from pacer.service import Service
from pacer.service.first_steps import FirstSteps

log = logging.getLogger("pacer.service")
SWITCH_INTERVAL_S = 0.001
GC_YOUNG_THRESHOLD = 50_000


class Server(Service):
    """A `Service` serving its HTTP API on ``PACER_API__HOST``:``PACER_API__PORT``; ``port``
    is the one bound (the settings may say 0: any free port), once started."""

    port: int | None = None
    _runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Start the service, then serve the API; ready (``READY=1`` to systemd) on return."""
        # The loop shares the GIL with synthesis and proving threads; by default a thread may
        # keep it 5 ms before the loop gets a turn, which is loop lag. 1 ms keeps lag low.
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        await super().start()
        self._runner = build_runner(self)
        await self.startup.timed("api", self._serve_api(self._runner), self._clock)
        self.startup.ready_s = self._clock() - self.first_steps.began
        # Start-up objects (modules, settings, the resumed backlog) live as long as the process:
        # keep them out of the collector's full passes, which otherwise stall the loop.
        gc.freeze()
        # Young collections every 700 allocations land inside one dispatch decision in twenty
        # at thousands of partitions/s; fifty thousand makes them rare, each still ~1 ms.
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
        work = (
            f"{self.resumed} jobs resumed"
            if self.fleet is None
            else f"host {self.fleet.host} of the fleet at {self.settings.journal.location}"
        )
        log.info(
            "pacer ready on http://%s:%d (workload %s, policy %s, %d workers, %s)",
            self.settings.api.host, self.port, self.workload.name, self.policy_name,
            self.pipeline.workers, work,
        )  # fmt: skip
        log.info("start-up: %s", self.startup.words())
        sd_notify(f"READY=1\nSTATUS=serving on port {self.port}, {work}")

    def _say_starting(self) -> str:
        """What a start that takes long waits for, logged and told to systemd (STATUS=)."""
        line = super()._say_starting()
        sd_notify(f"STATUS={line}")
        return line

    async def _serve_api(self, runner: web.AppRunner) -> None:
        await runner.setup()
        site = web.TCPSite(runner, self.settings.api.host, self.settings.api.port)
        await site.start()
        self.port = int(runner.addresses[0][1])

    async def shutdown(self) -> bool:
        """Drain (the API answers meanwhile: not ready, no new jobs), stop serving, close.
        True if all in-flight work finished within the drain budget."""
        sd_notify("STOPPING=1\nSTATUS=draining")
        finished = await self.drain()
        if self._runner is not None:
            await self._runner.cleanup()
        await self.close()
        log.info("stopped")
        return finished


async def serve(
    settings: Settings, first_steps: FirstSteps | None = None, held: Held | None = None
) -> int:
    """Serve until SIGTERM or SIGINT, then drain and stop; the exit status: 0, or 1 when a
    second signal cut the drain short or the stop left a journal call that hangs. A start
    that fails releases what it took, then raises. ``first_steps``: those `pacer serve` took
    before it imported this module, and ``held`` the signals it held meanwhile."""
    server = Server(settings, first_steps=first_steps)
    with Signals(server.hurry).installed(held) as signals:
        try:
            started = await _started_unless(server, signals.stop)
        except BaseException:
            await server.shutdown()
            raise
        if started:
            await signals.stop.wait()
        if signals.handover:
            server.keep_pool()
        await server.shutdown()
    return 1 if signals.forced or server.journal_access.left else 0


async def _started_unless(server: Server, stop: asyncio.Event) -> bool:
    """Start ``server``; should ``stop`` be set first (a signal), give the start up where it
    is (a pool it began is still finished, then kept or freed, by the stop) and say False: a
    start stuck on a journal that does not answer would otherwise hold the stop for good."""
    starting = asyncio.ensure_future(server.start())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if starting.done():
        starting.result()  # a start that failed raises here
        return True
    log.warning("stopping before ready: the start is given up while it waits for %s",
                server.waiting_for())  # fmt: skip
    starting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await starting
    return False


def run(settings: Settings, first_steps: FirstSteps | None = None, held: Held | None = None) -> int:
    """``pacer serve``: the service on uvloop; the process's exit status."""
    import uvloop

    return uvloop.run(serve(settings, first_steps, held))
