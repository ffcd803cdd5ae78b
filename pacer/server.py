"""``pacer serve``: the service with its HTTP API, stopped in order by signals, told to systemd.

`Server` holds a `pacer.service.Service`: it serves `pacer.api` (only the probes until the
service has started), and stops serving after the drain, before the journal closes. `serve`
runs one until SIGTERM or SIGINT, or SIGUSR2, which also hands the pinned pool over to the
next pacer (`Service.keep_pool`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import sys

from aiohttp import web

from pacer.api import build_runner
from pacer.config import Settings
from pacer.config.operation import ListenError
from pacer.runtime.signals import Held, Signals, sd_notify
from pacer.service.first_steps import FirstSteps
from pacer.service.lifecycle import Service

log = logging.getLogger("pacer.service")
SWITCH_INTERVAL_S = 0.001
GC_YOUNG_THRESHOLD = 50_000


class Server:
    """``service`` serving its HTTP API on ``PACER_API__HOST``:``PACER_API__PORT``; ``port``
    is the one bound (the settings may say 0: any free port), once started. A start that
    takes long is told to systemd as well as logged."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        service.status_listeners.append(_tell_systemd)

    async def start(self) -> None:
        """Serve the API, then start the service; ready (``READY=1`` to systemd) on return.
        Until then only the probes answer (`pacer.api.middleware.PROBES`): a start that waits
        for its journal says why on ``/readyz``."""
        service = self.service
        # The loop shares the GIL with synthesis and proving threads; by default a thread may
        # keep it 5 ms before the loop gets a turn, which is loop lag. 1 ms keeps lag low.
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self._runner = build_runner(service)
        await service.startup.timed("api", self._serve_api(self._runner), service.clock)
        log.info("listening on http://%s:%d; /readyz says when pacer is ready",
                 service.settings.api.host, self.port)  # fmt: skip
        await service.start()
        service.startup.ready_s = service.clock() - service.first_steps.began
        # Start-up objects (modules, settings, the resumed backlog) live as long as the process:
        # keep them out of the collector's full passes, which otherwise stall the loop.
        gc.freeze()
        # Young collections every 700 allocations land inside one dispatch decision in twenty
        # at thousands of partitions/s; fifty thousand makes them rare, each still ~1 ms.
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
        fleet = service.fleet
        work = (
            f"{service.resumed} jobs resumed"
            if fleet is None
            else f"host {fleet.host} of the fleet at {service.settings.journal.location}"
        )
        log.info(
            "pacer ready on http://%s:%d (workload %s, policy %s, %d workers, %s)",
            service.settings.api.host, self.port, service.workload.name, service.policy_name,
            service.pipeline.workers, work,
        )  # fmt: skip
        log.info("start-up: %s", service.startup.words())
        sd_notify(f"READY=1\nSTATUS=serving on port {self.port}, {work}")

    async def _serve_api(self, runner: web.AppRunner) -> None:
        await runner.setup()
        api = self.service.settings.api
        site = web.TCPSite(runner, api.host, api.port)
        try:
            await site.start()
        except OSError as exc:
            reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            raise ListenError(api.host, api.port, reason) from None
        self.port = int(runner.addresses[0][1])
        socket = self.service.settings.engine.socket
        if socket is not None:
            if socket.is_socket():
                socket.unlink()  # a previous pacer's: nothing listens there after a stop
            await web.UnixSite(runner, str(socket)).start()
            log.info("listening on unix:%s too (engine sessions and the API)", socket)

    async def shutdown(self) -> bool:
        """Drain (the API answers meanwhile: not ready, no new jobs), stop serving, close.
        True if all in-flight work finished within the drain budget."""
        sd_notify("STOPPING=1\nSTATUS=draining")
        finished = await self.service.drain()
        if self._runner is not None:
            await self._runner.cleanup()
        await self.service.close()
        if self.port is not None:  # not after a start that could not listen: its error says why
            log.info("stopped")
        return finished


def _tell_systemd(line: str) -> None:
    sd_notify(f"STATUS={line}")


async def serve(settings: Settings, first_steps: FirstSteps, held: Held | None = None) -> int:
    """Serve until SIGTERM or SIGINT, then drain and stop; the exit status: 0, or 1 when a
    second signal cut the drain short or the stop left a journal call that hangs. A start
    that fails releases what it took, then raises. ``first_steps``: the start's first steps
    (`pacer serve` takes them before it imports this module); ``held``: the signals it held
    meanwhile."""
    service = Service(settings, first_steps)
    server = Server(service)
    with Signals(service.hurry).installed(held) as signals:
        try:
            started = await _started_unless(server, signals.stop)
        except BaseException:
            await server.shutdown()
            raise
        if started:
            await signals.stop.wait()
        if signals.handover:
            service.keep_pool()
        await server.shutdown()
    return 1 if signals.forced or service.journal_access.left else 0


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
                server.service.waiting_for())  # fmt: skip
    starting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await starting
    return False


def run(settings: Settings, first_steps: FirstSteps, held: Held | None = None) -> int:
    """``pacer serve``: the service on uvloop; the process's exit status."""
    import uvloop

    return uvloop.run(serve(settings, first_steps, held))
