"""Signals in, sd_notify out: what the process hears from whoever runs it, and tells them.

The first SIGTERM or SIGINT asks for a drain (SIGUSR2 too, handing the pinned pool over to the
next pacer); a second cuts it short, and any later one too ends a wait for the journal. Either
way the service stops in order (committing what it proved, closing the journal) and the exit
status comes back through ``main``: 0 after a drain, 1 when a second signal cut it short (or a
journal call hung past the stop's bound).

No other signal ends the process without a word. SIGQUIT writes every thread's stack to stderr
(even while the event loop is stuck) and pacer carries on. The others whose default is to end
the process (`IGNORED`: SIGHUP among them) are logged and ignored. A crash (SIGSEGV, SIGBUS,
SIGFPE, SIGILL, SIGABRT) writes every thread's stack before the process dies (`faulthandler`).
Python itself ignores SIGPIPE and SIGXFSZ (the write fails instead); SIGKILL and SIGSTOP
cannot be caught; real-time signals keep their default.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import os
import signal
import socket
from collections.abc import Callable, Iterator

log = logging.getLogger("pacer.service")
HANDOVER = signal.SIGUSR2
"""Drain and stop as SIGTERM does, leaving the pinned pool for the next pacer on this host."""
STOPS = (signal.SIGTERM, signal.SIGINT, HANDOVER)
STACKS = signal.SIGQUIT
"""Write every thread's stack to stderr, and carry on."""
IGNORED: dict[int, str] = {
    signal.SIGHUP: "pacer reads its settings only at start (restart it to change them), and a "
    "closed terminal does not stop it (SIGTERM does)",
    signal.SIGUSR1: "it means nothing to pacer",
    signal.SIGALRM: "pacer sets no alarm",
    signal.SIGVTALRM: "pacer sets no timer",
    signal.SIGPROF: "no profiler runs",
    signal.SIGIO: "pacer asks for no signal-driven I/O",
    signal.SIGPWR: "a power failure is the service manager's to act on (SIGTERM drains)",
    signal.SIGXCPU: "past the CPU time limit (RLIMIT_CPU): the kernel ends the process at its "
    "hard limit",
}
"""Signals whose default would end the process, each with why pacer ignores it."""
SIGNALS = (*STOPS, STACKS, *IGNORED)


class Signals:
    """First SIGTERM/SIGINT/SIGUSR2: set ``stop`` (SIGUSR2 also sets ``handover``). Second:
    call ``on_second`` (cut the drain short) and set ``forced``; each later one calls it again
    (a stop waiting for the journal waits no more). SIGQUIT and `IGNORED` are logged, and
    change nothing. `installed` puts the handlers on the running loop and restores the ones
    there were on exit."""

    def __init__(self, on_second: Callable[[], None]) -> None:
        self.stop = asyncio.Event()
        self.forced = False
        self.handover = False
        self.received: list[int] = []
        self._on_second = on_second

    def _handle(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if signum == STACKS:
            log.warning("signal %s: every thread's stack is written to stderr; pacer carries on",
                        name)  # fmt: skip
            return
        if signum in IGNORED:
            log.warning("signal %s ignored: %s", name, IGNORED[signum])
            return
        self.received.append(signum)
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
        faulthandler.unregister(STACKS)  # Held's, on the handler the loop replaces
        previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
        for signum in SIGNALS:
            loop.add_signal_handler(signum, self._handle, signum)
        # The stacks written by the C handler, even while the loop is stuck; then the loop's.
        faulthandler.register(STACKS, all_threads=True, chain=True)
        for early in held.received if held is not None else []:
            loop.call_soon(self._handle, early)
        try:
            yield self
        finally:
            faulthandler.unregister(STACKS)
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

    `install` also has a crash write every thread's stack to stderr (`faulthandler`), and
    SIGQUIT write them at once, as the loop's handlers will.
    """

    def __init__(self) -> None:
        self.received: list[int] = []

    def install(self) -> Held:
        for signum in SIGNALS:
            signal.signal(signum, self._record)
        faulthandler.enable(all_threads=True)
        faulthandler.register(STACKS, all_threads=True, chain=True)
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
