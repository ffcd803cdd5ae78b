"""One engine's session: its partitions in flight as its events tell them, and the decisions
of its own `PIController`, the class the in-process pipeline paces with.

Pure and synchronous on an injected clock (the tests step a virtual one). Durations come from
the engine's events, so the engine's clock and pacer's need not agree; pacer's clock only
times what pacer itself sees: the ages of syntheses, the gaps between a GPU worker's events.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pacer.config import ControllerSettings
from pacer.control.controller import PIController
from pacer.control.estimates import Estimates
from pacer.control.policy import AgesView, Caps, Observation, SynthesisParts, budget_room
from pacer.engine.protocol import Event, Hello, ProtocolError, decode, parse_event

REFUSED_BUT_TAKEN = frozenset(
    {"malformed", "unknown_partition", "duplicate_partition", "wrong_state", "unknown_worker"}
)

# What each state of a partition is called in the events that put it there.
STATES = {"synthesizing": "dispatched", "ready": "synthesis_ready", "on_gpu": "gpu_started"}

# Events after which the controller decides at once: they change its inputs beyond a count.
DECIDE_AFTER = frozenset({"backlog", "worker_up", "worker_down", "dropped", "synthesis_failed"})


@dataclass
class Applied:
    """What one event did: ``gap_s``, the idle gap (s) a GPU worker ended by starting a
    partition (None if it ended none); ``ended``: the engine said bye."""

    gap_s: float | None = None
    ended: bool = False


class EngineSession:
    """An engine's partitions and its controller. ``take(frame)`` applies one event (or
    raises `ProtocolError`, having taken in its seq where the spec says so); ``answer()``
    is the decision message to send for the events taken in; ``decide()`` asks the
    controller (when ``due_at`` comes).

    >>> from pacer.engine.protocol import Shape
    >>> hello = Hello("e1", "k", Shape(2, 1 << 30, 8 << 30, 4))
    >>> s = EngineSession(hello, ControllerSettings(), clock=lambda: 0.0)
    >>> s.take('{"type": "backlog", "seq": 1, "partitions": 10}').ended
    False
    >>> s.answer()["dispatch"] > 0, s.ack
    (True, 1)
    """

    def __init__(
        self,
        hello: Hello,
        settings: ControllerSettings,
        clock: Callable[[], float],
        estimates: Estimates | None = None,
    ) -> None:
        self.hello = hello
        shape = hello.shape
        self.caps = Caps(shape.synthesis_slots, shape.inflight_cap)
        self.controller = PIController(settings, self.caps, clock, estimates)
        self._clock = clock
        self.ack = 0  # the seq of the last event taken in
        self.owed = 0  # advised by a decision, neither dispatched nor declined yet
        self.backlog = 0
        self.synthesizing: dict[str, float] = {}  # partition: when its dispatch was heard
        self.ready: dict[str, float] = {}
        self.on_gpu: dict[str, tuple[int, float]] = {}  # partition: (worker, start)
        self.live_workers: set[int] = set(range(shape.gpu_workers))
        self._last_finish: dict[int, float] = {}  # worker: when its last partition ended
        self.events = 0
        self.gpu_busy_s = 0.0  # GPU seconds the engine measured
        self.due_at: float | None = None  # when the last decision asked to decide again
        self.decisions = 0  # the controller's decisions (the other answers only acknowledge)
        self._stale = True  # an event changed what the controller would decide
        self._capped = False  # the last decision left no room: freeing any is news
        self._mode = ""

    # -- events -------------------------------------------------------------------------

    def take(self, frame: str | bytes) -> Applied:
        """Apply one frame. ProtocolError for a frame that breaks a rule: its seq is taken
        in (``ack`` moves past it) unless it is a repeat, out of order or unreadable."""
        message = decode(frame)
        try:
            event = parse_event(message, self.ack + 1)
            self.ack = event.seq
            self.events += 1
            applied = self._apply(event)
        except ProtocolError as exc:
            if exc.code in REFUSED_BUT_TAKEN and exc.seq == self.ack + 1:
                self.ack = exc.seq
            raise
        if event.kind in DECIDE_AFTER or (
            event.kind == "gpu_started"
            and self.backlog > self.owed
            and len(self.ready) < self.controller.terms.setpoint
        ):
            self._stale = True  # a GPU took a partition and left fewer ready than needed
        return applied

    def _apply(self, event: Event) -> Applied:
        now = self._clock()
        kind, partition = event.kind, event.partition
        if kind == "dispatched":
            assert partition is not None
            if self._where(partition) is not None:
                raise self._refused(event, "duplicate_partition", "is already in flight")
            self.owed = max(0, self.owed - 1)
            self.backlog = max(0, self.backlog - 1)
            self.synthesizing[partition] = now
        elif kind == "declined":
            self.owed = max(0, self.owed - (event.count or 0))
        elif kind == "synthesis_started":
            self._expect(event, "synthesizing")
        elif kind == "synthesis_ready":
            self._expect(event, "synthesizing")
            del self.synthesizing[partition or ""]
            self.ready[partition or ""] = now
            if event.seconds is not None:
                parts = None if event.compute_s is None else SynthesisParts(event.compute_s)
                self.controller.observe_synthesis(event.seconds, parts)
        elif kind == "synthesis_failed":
            self._expect(event, "synthesizing")
            del self.synthesizing[partition or ""]
            if event.seconds is not None:
                self.controller.observe_synthesis_failure(event.seconds)
        elif kind == "gpu_started":
            return self._gpu_started(event, now)
        elif kind == "gpu_finished":
            self._gpu_finished(event, now)
        elif kind == "dropped":
            self._drop(event)
        elif kind in ("worker_up", "worker_down"):
            self._worker(event, up=kind == "worker_up")
        elif kind == "backlog":
            self.backlog = event.count or 0
        return Applied(ended=kind == "bye")

    def _gpu_started(self, event: Event, now: float) -> Applied:
        self._expect(event, "ready")
        worker = event.worker if event.worker is not None else -1
        if worker not in self.live_workers:
            raise self._refused(
                event,
                "unknown_worker",
                f"names worker {worker}, which is not up (shape.gpu_workers, or a worker_up)",
            )
        del self.ready[event.partition or ""]
        self.on_gpu[event.partition or ""] = (worker, now)
        last = self._last_finish.pop(worker, None)
        return Applied(gap_s=None if last is None else max(0.0, now - last))

    def _gpu_finished(self, event: Event, now: float) -> None:
        self._expect(event, "on_gpu")
        worker, _ = self.on_gpu[event.partition or ""]
        if worker != event.worker:
            raise self._refused(
                event, "wrong_state", f"is on worker {worker}, not on worker {event.worker}"
            )
        del self.on_gpu[event.partition or ""]
        if worker in self.live_workers:
            self._last_finish[worker] = now
        if event.seconds is not None:
            self.gpu_busy_s += event.seconds
            self.controller.observe_gpu_service(event.seconds)

    def _drop(self, event: Event) -> None:
        where = self._where(event.partition or "")
        if where is None:
            raise self._refused(event, "unknown_partition", "is not in flight")
        del getattr(self, where)[event.partition or ""]

    def _worker(self, event: Event, *, up: bool) -> None:
        worker = event.worker if event.worker is not None else -1
        if up:
            self.live_workers.add(worker)
            return
        self.live_workers.discard(worker)
        self._last_finish.pop(worker, None)  # its gap ends with it: a dead worker idles no GPU

    def _where(self, partition: str) -> str | None:
        for name in ("synthesizing", "ready", "on_gpu"):
            if partition in getattr(self, name):
                return name
        return None

    def _expect(self, event: Event, state: str) -> None:
        where = self._where(event.partition or "")
        if where is None:
            raise self._refused(
                event,
                "unknown_partition",
                "is not in flight (no dispatched event named it, or it has ended)",
            )
        if where != state:
            raise self._refused(
                event,
                "wrong_state",
                f"is {STATES[where]}; {event.kind} needs it {STATES[state]}",
            )

    @staticmethod
    def _refused(event: Event, code: str, rule: str) -> ProtocolError:
        return ProtocolError(
            code,
            f"{event.kind}: partition {event.partition!r} {rule}",
            "partition" if code != "unknown_worker" else "worker",
            event.seq,
        )

    # -- decisions ----------------------------------------------------------------------

    @property
    def inflight(self) -> int:
        """Partitions holding the engine's memory, those advised and not yet reported too."""
        return len(self.synthesizing) + len(self.ready) + len(self.on_gpu) + self.owed

    @property
    def inflight_bytes(self) -> int:
        return self.inflight * self.hello.shape.partition_bytes

    def observation(self) -> Observation:
        """The engine as the controller sees it now."""
        now = self._clock()
        shape = self.hello.shape
        free = shape.memory_budget_bytes - self.inflight_bytes
        starts = sorted(start for _, start in self.on_gpu.values())
        oldest = itertools.islice(self.synthesizing.values(), Observation.SYNTHESIS_AGES)
        return Observation(
            ready=len(self.ready),
            synthesizing=len(self.synthesizing) + self.owed,
            gpu_busy=len(self.on_gpu),
            gpu_workers=len(self.live_workers),
            backlog=max(0, self.backlog - self.owed),
            budget_free=budget_room(free, shape.partition_bytes, holding=self.inflight > 0),
            synthesis_ages_s=tuple(now - at for at in oldest),
            gpu_busy_ages_s=AgesView(starts, now),
        )

    def room(self) -> int:
        """Partitions the caps let start now: synthesis slots, the in-flight cap, the backlog
        and the memory budget (what the controller's own room counts), O(1)."""
        shape = self.hello.shape
        synthesizing = len(self.synthesizing) + self.owed
        free = shape.memory_budget_bytes - self.inflight_bytes
        return max(
            0,
            min(
                self.caps.synthesis_concurrency - synthesizing,
                self.caps.inflight_partitions - self.inflight,
                self.backlog - self.owed,
                budget_room(free, shape.partition_bytes, holding=self.inflight > 0),
            ),
        )

    def answer(self) -> dict[str, Any]:
        """The decision message for the events taken in: the controller's decision where
        one is due, where an event changed what it would decide (see `DECIDE_AFTER`, a
        ready depth below the setpoint, room freed after a decision that had none) or while
        it gives no time to ask again with a backlog to dispatch; otherwise an
        acknowledgement that advises nothing more and keeps the last decision's time, O(1)."""
        now = self._clock()
        due = self.due_at
        if due is None and self.backlog <= self.owed and not self._stale:
            due = math.inf  # nothing to dispatch until a backlog event says there is
        elif self._stale or due is None or now >= due or (self._capped and self.room() > 0):
            return self.decide()
        terms = self.controller.terms
        return {
            "type": "decision",
            "dispatch": 0,
            "ack": self.ack,
            "next_in_s": None if due == math.inf else due - now,
            "interval_s": terms.interval_s,
            "mode": self._mode,
        }

    def decide(self) -> dict[str, Any]:
        """The controller's decision now, as the ``decision`` message; what it advises is
        owed until the engine reports it dispatched or declined."""
        now = self._clock()
        decision = self.controller.decide(self.observation())
        self.decisions += 1
        self.owed += decision.dispatch
        self.due_at = decision.next_at
        self._stale = False
        self._capped = self.room() == 0
        terms = self.controller.terms
        self._mode = str(terms.mode)
        return {
            "type": "decision",
            "dispatch": decision.dispatch,
            "ack": self.ack,
            "next_in_s": None if decision.next_at is None else max(0.0, decision.next_at - now),
            "interval_s": terms.interval_s,
            "mode": self._mode,
        }

    def snapshot(self) -> dict[str, Any]:
        """The session's state for ``/v1/status`` (counts of partitions, bytes, seconds)."""
        terms = self.controller.terms
        est = self.controller.estimates
        return {
            "engine": self.hello.engine,
            "workload_key": self.hello.workload_key,
            "mode": str(terms.mode),
            "interval_s": terms.interval_s,
            "error": terms.error,
            "projected_ready": terms.projected_ready,
            "setpoint": terms.setpoint,
            "ready": len(self.ready),
            "synthesizing": len(self.synthesizing),
            "gpu_busy": len(self.on_gpu),
            "owed": self.owed,
            "backlog": self.backlog,
            "gpu_workers": len(self.live_workers),
            "inflight": self.inflight,
            "inflight_bytes": self.inflight_bytes,
            "memory_budget_bytes": self.hello.shape.memory_budget_bytes,
            "events": self.events,
            "ack": self.ack,
            "gpu_busy_s": self.gpu_busy_s,
            "estimates": {"gpu_service_s": est.gpu_service_s, "synthesis_s": est.synthesis_s},
        }
