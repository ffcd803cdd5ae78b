"""Signals in, sd_notify out: what the process hears from whoever runs it, and tells them.

The first SIGTERM or SIGINT asks for a drain; SIGUSR2 also hands the pool to the next pacer. A
second signal cuts the drain short; a later one also ends a wait for the journal. The service
stops in order either way. ``main`` exits 0 after a drain, 1 when cut short or the journal hung.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable, Iterator

log = logging.getLogger("pacer.service")
HANDOVER = signal.SIGUSR2
"""Drain and stop as SIGTERM does, leaving the pinned pool for the next pacer on this host."""
SIGNALS = (signal.SIGTERM, signal.SIGINT, HANDOVER)


class Signals:
    """The first SIGTERM, SIGINT or SIGUSR2 sets ``stop``; SIGUSR2 also sets ``handover``.

    A second signal calls ``on_second`` and sets ``forced``; each later one calls it again.
    `installed` puts the handlers on the running loop and restores the old ones on exit.
    """

    def __init__(self, on_second: Callable[[], None]) -> None:
        self.stop = asyncio.Event()
        self.forced = False
        self.handover = False
        self.received: list[int] = []
        self._on_second = on_second

    def _handle(self, signum: int) -> None:
        self.received.append(signum)
        name = signal.Signals(signum).name
        if len(self.received) == 1:
            self.handover = signum == HANDOVER
            what = "; the pinned pool is kept for the next pacer" if self.handover else ""
            log.info("signal %s: draining%s", name, what)
            self.stop.set()
        elif not self.forced:
            log.warning("second signal: exiting now, in-flight work left to the journal")
            self.forced = True
            self._on_second()
            self.stop.set()
        else:
            log.warning("signal %s: already stopping; a wait for the journal ends now", name)
            self._on_second()

    @contextlib.contextmanager
    def installed(self, held: Held | None = None) -> Iterator[Signals]:
        """The handlers on the running loop; what ``held`` received before, handled now."""
        loop = asyncio.get_running_loop()
        previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
        for signum in SIGNALS:
            loop.add_signal_handler(signum, self._handle, signum)
        for early in held.received if held is not None else []:
            loop.call_soon(self._handle, early)
        try:
            yield self
        finally:
            for signum in SIGNALS:
                loop.remove_signal_handler(signum)
                handler = previous[signum]
                if handler is not None:
                    signal.signal(signum, handler)


class Held:
    """The signals `Signals` takes, held from the very start of `pacer serve` until the
    service's loop takes them over (`Signals.installed`): each one received meanwhile is
    kept, and handled then, instead of ending the process half started.

    Held before anything else loads, they also keep the process's handler Python's for good: a
    library that saves the handler it finds and puts it back later, from any thread (LLVM's
    signal handling does, which Numba and CUDA's runtime compiler carry), would otherwise put
    back the default where it loaded before the loop took the signals, as the pool's pinning
    and the CUDA work beside it now do, and the next SIGTERM would end the process.
    """

    def __init__(self) -> None:
        self.received: list[int] = []

    def install(self) -> Held:
        for signum in SIGNALS:
            signal.signal(signum, self._record)
        return self

    def _record(self, signum: int, frame: object) -> None:
        self.received.append(signum)


def sd_notify(message: str) -> bool:
    """Send ``message`` to systemd's notify socket, if there is one (sd_notify protocol)."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(address)
            sock.sendall(message.encode())
        except OSError as exc:
            log.warning("sd_notify failed: %s", exc)
            return False
    return True
