"""Every engine session of a `pacer serve`: opened or resumed by a hello, fed by its stream,
told decisions when they are due, kept through a disconnection for a grace period.

Each session writes to its engine from a task of its own through a bounded queue: an engine
that reads slower than pacer writes fills only its own queue, and is then told and dropped.
The frames that arrive together (read in one turn of the loop) get one answer, whose ``ack``
is the last of them. The hub's timers run on an injected `Scheduler` (the tests' run on a
virtual clock).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from aiohttp import WSCloseCode, web
from prometheus_client import CollectorRegistry

from pacer.config import Settings
from pacer.engine.protocol import PROTOCOL_VERSION, Hello, ProtocolError
from pacer.engine.session import EngineSession
from pacer.engine.store import EstimatesStore
from pacer.journal.health import JournalUnavailable
from pacer.metrics.engines import EngineMetrics, EngineView
from pacer.pipeline.core import MIN_WAIT_S

log = logging.getLogger("pacer.engine")

# WebSocket close codes of the protocol (4000-4999 are the application's).
CLOSE_HELLO = 4000  # the hello broke a rule (the error message says which)
CLOSE_VERSION = 4001  # a protocol version this pacer does not speak
CLOSE_TAKEN = 4002  # another connected session has the engine's name
CLOSE_FULL = 4003  # PACER_ENGINE__MAX_SESSIONS sessions already
CLOSE_OVERFLOW = 4008  # the engine read too slowly: its send queue overflowed
CLOSE_REPLACED = 4010  # the session was resumed on a newer connection
CLOSE_CODES = {"send_queue_overflow": CLOSE_OVERFLOW, "stopping": WSCloseCode.GOING_AWAY}
CLOSE_WAIT_S = 1.0


class Handle(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """Where the hub's timers run: ``call_soon`` once the frames read now are taken in,
    ``call_later`` after ``delay_s`` seconds. `LoopScheduler` is asyncio's."""

    def call_soon(self, callback: Callable[[], None]) -> Handle: ...

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Handle: ...


class LoopScheduler:
    """`Scheduler` on the running asyncio loop."""

    def call_soon(self, callback: Callable[[], None]) -> Handle:
        return asyncio.get_running_loop().call_soon(callback)

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Handle:
        return asyncio.get_running_loop().call_later(delay_s, callback)


class Live:
    """A session with its connection (None while the engine is away), its send queue and
    the timers of its next decision and of its grace period."""

    def __init__(self, session_id: str, token: str, session: EngineSession, queue_size: int):
        self.id = session_id
        self.token = token
        self.session = session
        self.ws: web.WebSocketResponse | None = None
        self.queue: asyncio.Queue[tuple[str, float | None]] = asyncio.Queue(queue_size)
        self.writer: asyncio.Task[None] | None = None
        self.timer: Handle | None = None
        self.grace: Handle | None = None
        self.answer: Handle | None = None  # the answer to the frames read this turn
        self.answer_at: float | None = None  # when the first of them arrived (perf_counter)
        self.errors: Counter[str] = Counter()

    @property
    def engine(self) -> str:
        return self.session.hello.engine

    def view(self) -> EngineView:
        return EngineView(self.session.snapshot(), self.ws is not None, dict(self.errors))


class EngineHub:
    """The sessions of one service, by id. ``clock``: the controllers' (monotonic seconds);
    ``timers``: where decisions and grace periods are timed, on the same clock; ``store``:
    the saved estimates (in memory only by default); ``run``: how the store's journal calls
    run (the service's journal thread; by default a thread of asyncio's)."""

    def __init__(
        self,
        settings: Settings,
        registry: CollectorRegistry,
        clock: Callable[[], float] = time.monotonic,
        store: EstimatesStore | None = None,
        timers: Scheduler | None = None,
        run: Callable[[Callable[[], None]], Awaitable[None]] = asyncio.to_thread,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self.timers: Scheduler = timers if timers is not None else LoopScheduler()
        self.store = store if store is not None else EstimatesStore(None)
        self._run = run
        self.sessions: dict[str, Live] = {}
        self.metrics = EngineMetrics(registry, self.views)
        self._tasks: set[asyncio.Task[None]] = set()

    def _later(self, ending: Coroutine[Any, Any, None]) -> None:
        """Run ``ending`` as a task, held until it ends."""
        task = asyncio.ensure_future(ending)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def views(self) -> list[EngineView]:
        return [live.view() for live in self.sessions.values()]

    def status(self) -> list[dict[str, Any]]:
        """Each session's state, for ``/v1/status``."""
        return [
            {
                "session": live.id,
                "connected": live.ws is not None,
                **live.session.snapshot(),
                "errors": dict(live.errors),
            }
            for live in self.sessions.values()
        ]

    # -- opening and resuming ------------------------------------------------------------

    async def attach(self, hello: Hello, ws: web.WebSocketResponse) -> Live:
        """The session ``hello`` opens or resumes, now on ``ws``; its welcome and a first
        decision sent. ProtocolError (``taken``, ``full``) where it cannot have one."""
        live = self._resumable(hello)
        resumed = live is not None
        if live is None:
            live = await self._opened(hello)
        elif live.ws is not None:
            old = live.ws
            self._disconnect(live)
            await close_quickly(old, CLOSE_REPLACED, "resumed on a newer connection")
        if live.grace is not None:
            live.grace.cancel()
            live.grace = None
        live.ws = ws
        live.queue = asyncio.Queue(self.settings.engine.send_queue)
        live.writer = asyncio.ensure_future(self._write(live, ws))
        self._send(
            live,
            {
                "type": "welcome",
                "protocol": PROTOCOL_VERSION,
                "session": live.id,
                "token": live.token,
                "resumed": resumed,
                "ack": live.session.ack,
                "grace_s": self.settings.engine.grace_s,
                "warm": live.session.controller.estimates.known,
            },
        )
        log.info(
            "engine %s %s session %s (%d sessions)",
            live.engine,
            "resumed" if resumed else "opened",
            live.id,
            len(self.sessions),
        )
        self.decide(live)
        return live

    def _resumable(self, hello: Hello) -> Live | None:
        if hello.resume is None:
            return None
        session_id, token = hello.resume
        live = self.sessions.get(session_id)
        if live is None or live.engine != hello.engine:
            return None
        if not hmac.compare_digest(live.token.encode(), token.encode()):
            return None
        return live

    async def _opened(self, hello: Hello) -> Live:
        for other in list(self.sessions.values()):
            if other.engine == hello.engine:
                if other.ws is not None:
                    raise ProtocolError(
                        "taken",
                        f"engine {hello.engine!r} has a connected "
                        "session: resume it with its token, or use another "
                        "name",
                        "engine",
                    )
                await self.end(other, "replaced")  # the engine restarted without its token
        if len(self.sessions) >= self.settings.engine.max_sessions:
            raise ProtocolError(
                "full",
                f"pacer has PACER_ENGINE__MAX_SESSIONS="
                f"{self.settings.engine.max_sessions} sessions already",
            )
        if not self.store.loaded:
            await self._journaled("read", self.store.load)
        session = EngineSession(
            hello, self.settings.controller, self._clock, self.store.get(hello.workload_key)
        )
        live = Live(
            secrets.token_hex(8),
            secrets.token_urlsafe(24),
            session,
            self.settings.engine.send_queue,
        )
        self.sessions[live.id] = live
        return live

    # -- events and decisions ------------------------------------------------------------

    def received(self, live: Live, frame: str | bytes, at: float) -> bool:
        """Take in one frame that arrived at ``at`` (perf_counter s): an error at once for a
        frame that breaks a rule; the answer once the frames read with it are taken in.
        False once the engine said bye."""
        try:
            applied = live.session.take(frame)
        except ProtocolError as exc:
            if exc.code != "repeat":
                live.errors[exc.code] += 1
                self._send(live, exc.message())
                log.info("engine %s: event refused: %s", live.engine, exc)
            self._answer_soon(live, at)
            return True
        if applied.gap_s is not None:
            self.metrics.gap.labels(live.engine).observe(applied.gap_s)
        if applied.ended:
            return False
        self._answer_soon(live, at)
        return True

    def _answer_soon(self, live: Live, at: float) -> None:
        if live.answer is None:
            live.answer_at = at
            live.answer = self.timers.call_soon(lambda: self._answer(live))

    def _answer(self, live: Live) -> None:
        """Answer the frames taken in since the last answer (`EngineSession.answer`)."""
        live.answer = None
        if live.ws is None:
            return
        decided = live.session.decisions
        message = live.session.answer()
        self._send(live, message, live.answer_at)
        if live.session.decisions != decided:
            self._ask_again(live, message["next_in_s"])

    def decide(self, live: Live) -> None:
        """Send the controller's decision now, and ask again when it says."""
        if live.ws is None:
            return  # the engine is away: it paces by its fallback until it resumes
        at = None
        if live.answer is not None:  # this decision answers the frames read this turn too
            live.answer.cancel()
            live.answer, at = None, live.answer_at
        message = live.session.decide()
        self._send(live, message, at)
        self._ask_again(live, message["next_in_s"])

    def _ask_again(self, live: Live, due_s: float | None) -> None:
        if live.timer is not None:
            live.timer.cancel()
            live.timer = None
        if due_s is not None:
            live.timer = self.timers.call_later(max(due_s, MIN_WAIT_S), lambda: self.decide(live))

    def _send(self, live: Live, message: dict[str, Any], at: float | None = None) -> None:
        if live.ws is None:
            return
        try:
            live.queue.put_nowait((_json(message), at))
        except asyncio.QueueFull:
            log.warning(
                "engine %s reads too slowly: %d messages wait to be sent; its session ends",
                live.engine,
                live.queue.qsize(),
            )
            ws = live.ws
            if self.ended(live, "send_queue_overflow"):
                self._later(close_quickly(ws, CLOSE_OVERFLOW, "send_queue_overflow"))
                self._later(self.save())

    async def _write(self, live: Live, ws: web.WebSocketResponse) -> None:
        latency = self.metrics.latency.labels(live.engine)
        while True:
            text, at = await live.queue.get()
            await ws.send_str(text)
            if at is not None:
                latency.observe(time.perf_counter() - at)

    # -- disconnection and ends -----------------------------------------------------------

    def detached(self, live: Live, ws: web.WebSocketResponse) -> None:
        """``ws`` closed: the session waits ``PACER_ENGINE__GRACE_S`` for its engine (unless it
        was resumed on another connection meanwhile, or has ended)."""
        if live.ws is not ws or self.sessions.get(live.id) is not live:
            return
        self._disconnect(live)
        grace = self.settings.engine.grace_s
        log.info(
            "engine %s disconnected; its session %s waits %g s for it", live.engine, live.id, grace
        )
        live.grace = self.timers.call_later(
            grace, lambda: self._later(self.end(live, "grace_expired"))
        )

    def _disconnect(self, live: Live) -> None:
        live.ws = None
        for handle in (live.timer, live.grace, live.answer):
            if handle is not None:
                handle.cancel()
        live.timer = live.grace = live.answer = None
        if live.writer is not None:
            live.writer.cancel()
            live.writer = None

    async def end(self, live: Live, reason: str) -> None:
        """End a session: its estimates kept (and saved), its connection closed, told why."""
        ws = live.ws
        if not self.ended(live, reason):
            return
        if ws is not None:
            await close_quickly(ws, CLOSE_CODES.get(reason, WSCloseCode.OK), reason)
        if reason != "stopping":
            await self.save()

    def ended(self, live: Live, reason: str) -> bool:
        """End a session at once (its bookkeeping; the connection is closed by `end`, or by
        its stream, which sees it gone): False if it had ended already."""
        if self.sessions.pop(live.id, None) is None:
            return False
        self._disconnect(live)
        self.metrics.ended.labels(reason).inc()
        self.metrics.forget(live.engine)
        self.store.put(live.session.hello.workload_key, live.session.controller.estimates)
        log.info("engine %s: session %s ended (%s)", live.engine, live.id, reason)
        return True

    async def save(self) -> None:
        """Write the estimates of the sessions that ended to the journal; with none to write,
        the journal is not called (a start that failed before it opened has nothing to save)."""
        if self.store.unsaved:
            await self._journaled("saved", self.store.save)

    async def _journaled(self, what: str, call: Callable[[], None]) -> None:
        """Run a journal ``call`` of the store; a failure is logged, not raised (engines then
        start cold, or the estimates wait for the next save)."""
        try:
            await self._run(call)
        except (JournalUnavailable, OSError, ValueError, RuntimeError) as exc:
            log.warning("engine estimates not %s in the journal: %s", what, exc)

    async def close(self) -> None:
        """Pacer stops: every session ends (its engine told: going away) and is saved."""
        await asyncio.gather(*(self.end(live, "stopping") for live in list(self.sessions.values())))
        await self.save()


async def close_quickly(ws: web.WebSocketResponse, code: int, reason: str) -> None:
    """Close ``ws`` with ``code``, waiting at most `CLOSE_WAIT_S` for the engine's answer: an
    engine that does not read never sends one."""
    if ws.closed:
        return
    try:
        await asyncio.wait_for(ws.close(code=code, message=reason.encode()), CLOSE_WAIT_S)
    except (TimeoutError, ConnectionError) as exc:
        log.info("engine connection closed without its answer (%s: %s)", reason, exc)


def _json(message: dict[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"), allow_nan=False)
