"""Baseline dispatch policies: what pacer's controller is compared against.

- ``Unpaced``: dispatch whenever the memory budget allows.
- ``FixedConcurrency``: keep a constant number of partitions in flight (the simulator's
  ``fixed``: a static setting tuned with knowledge of the scenario that a live system lacks).
- ``CuzkPacer``: the DispatchPacer published with the cuzk proving engine, rebuilt from its
  documented rules: the reference to beat.

They implement ``DispatchPolicy`` (``pacer.policy``) like the PI controller does, so the
simulator and the service's dispatch loop drive them alike (``PACER_CONTROLLER__POLICY=unpaced``
or ``cuzk`` for the service). Like the controller they are pure: a function of observations
and, for ``CuzkPacer``, an injected clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pacer.policy import Decision, Mode, Observation


def _memory_room(obs: Observation, memory_slots: int) -> int:
    return max(0, min(memory_slots - obs.inflight, obs.backlog))


def _mode(obs: Observation | None) -> Mode:
    """``drained`` with nothing in flight and nothing waiting, else ``pacing``."""
    if obs is None or (obs.inflight == 0 and obs.backlog == 0):
        return Mode.DRAINED
    return Mode.PACING


class _Counting:
    """Bootstrap counters, the no-op observation hooks and the mode of the simple baselines."""

    bootstraps = 0
    rebootstraps = 0
    _last_obs: Observation | None = None

    @property
    def mode(self) -> Mode:
        return _mode(self._last_obs)

    def observe_gpu_service(self, seconds: float) -> None:
        pass

    def observe_synthesis(self, seconds: float) -> None:
        pass

    def observe_synthesis_failure(self, elapsed_s: float) -> None:
        pass

    def interval_s(self) -> float:
        return 0.0


class Unpaced(_Counting):
    """Dispatch everything the memory budget can hold, at once.

    >>> Unpaced(memory_slots=10).decide(
    ...     Observation(ready=0, synthesizing=4, gpu_busy=0, gpu_workers=1, backlog=100))
    Decision(dispatch=6, next_at=None)
    """

    def __init__(self, memory_slots: int) -> None:
        self._slots = memory_slots

    def decide(self, obs: Observation) -> Decision:
        self._last_obs = obs
        return Decision(_memory_room(obs, self._slots), None)


class FixedConcurrency(_Counting):
    """Keep ``concurrency`` partitions in flight (within the memory budget)."""

    def __init__(self, concurrency: int, memory_slots: int) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self._concurrency = concurrency
        self._slots = memory_slots

    def decide(self, obs: Observation) -> Decision:
        self._last_obs = obs
        room = min(self._concurrency - obs.inflight, _memory_room(obs, self._slots))
        return Decision(max(0, room), None)


class CuzkPacer:
    """The cuzk DispatchPacer's documented rules, on pacer's policy interface.

    PV = EMA(α 0.15) of partitions waiting for a GPU, updated at each pacing tick; setpoint 8;
    feed-forward = EMA(α 0.2) of GPU processing time ÷ GPU workers; e = (target − PV) ÷ target;
    u = kp·e + ki·∫e dt with kp 0.5, ki 0.001, the integral clamped to [−20, +100]; multiplier
    1 + u clamped to [0.3, 3.0]; interval = feed-forward ÷ multiplier clamped to [50 ms, 60 s].
    Bootstrap: ``target`` partitions 3 s apart, then wait for the first GPU completion.
    Re-bootstrap when PV < 1 and everything dispatched has completed: ``target`` partitions
    spaced max(2 s, feed-forward), integral reset. No synthesis cap; only the memory budget
    bounds concurrency.
    """

    TARGET = 8
    ALPHA_READY = 0.15
    ALPHA_GPU = 0.2
    KP = 0.5
    KI = 0.001
    INTEGRAL = (-20.0, 100.0)
    MULTIPLIER = (0.3, 3.0)
    INTERVAL_S = (0.05, 60.0)
    BOOTSTRAP_SPACING_S = 3.0
    REBOOTSTRAP_MIN_SPACING_S = 2.0

    def __init__(self, memory_slots: int, clock: Callable[[], float]) -> None:
        self._slots = memory_slots
        self._clock = clock
        self._ema_ready = 0.0
        self._gpu_ema: float | None = None
        self._integral = 0.0
        self._interval = self.BOOTSTRAP_SPACING_S
        self._last_dispatch = -math.inf
        self._last_tick: float | None = None
        self._boot_left = self.TARGET  # partitions the current (re-)bootstrap still sends
        self._boot_spacing = self.BOOTSTRAP_SPACING_S
        self._await_gpu = False
        self._workers = 1
        self._last_obs: Observation | None = None
        self.bootstraps = 0
        self.rebootstraps = 0

    @property
    def mode(self) -> Mode:
        """``bootstrap`` until its bootstrap partitions are out and a GPU time is known."""
        if _mode(self._last_obs) is Mode.DRAINED:
            return Mode.DRAINED
        if self._gpu_ema is None or self._boot_left > 0:
            return Mode.BOOTSTRAP
        return Mode.PACING

    def observe_gpu_service(self, seconds: float) -> None:
        self._gpu_ema = (
            seconds
            if self._gpu_ema is None
            else self._gpu_ema + self.ALPHA_GPU * (seconds - self._gpu_ema)
        )
        self._await_gpu = False

    def observe_synthesis(self, seconds: float) -> None:
        pass

    def observe_synthesis_failure(self, elapsed_s: float) -> None:
        pass

    def interval_s(self) -> float:
        return self._interval

    def decide(self, obs: Observation) -> Decision:
        now = self._clock()
        self._last_obs = obs
        self._workers = max(1, obs.gpu_workers)
        room = _memory_room(obs, self._slots)
        if obs.backlog == 0:
            return Decision(0, None)
        if self._await_gpu:  # the bootstrap is out: nothing more until a GPU completion
            return Decision(0, None)
        if self._gpu_ema is None or self._boot_left > 0:
            return self._bootstrap(now, room)
        due = self._last_dispatch + self._interval
        if now < due:
            return Decision(0, due)
        self._tick(now, obs)
        if self._boot_left > 0:
            return self._bootstrap(now, room)
        if room <= 0:
            return Decision(0, now + self._interval)
        self._last_dispatch = now
        return Decision(1, now + self._interval)

    def _bootstrap(self, now: float, room: int) -> Decision:
        if self.bootstraps == 0:
            self.bootstraps = 1
        due = self._last_dispatch + self._boot_spacing
        if now < due:
            return Decision(0, due)
        if room <= 0:
            return Decision(0, now + self._boot_spacing)
        self._last_dispatch = now
        self._boot_left -= 1
        if self._boot_left == 0 and self._gpu_ema is None:
            self._await_gpu = True  # bootstrap over: wait for the first GPU completion
            return Decision(1, None)
        return Decision(1, now + self._boot_spacing)

    def _tick(self, now: float, obs: Observation) -> None:
        assert self._gpu_ema is not None
        dt = 0.0 if self._last_tick is None else now - self._last_tick
        self._last_tick = now
        self._ema_ready += self.ALPHA_READY * (obs.ready - self._ema_ready)
        feed_forward = self._gpu_ema / self._workers
        if self._ema_ready < 1 and obs.inflight == 0:
            self.rebootstraps += 1
            self._integral = 0.0
            self._boot_left = self.TARGET
            self._boot_spacing = max(self.REBOOTSTRAP_MIN_SPACING_S, feed_forward)
            return
        error = (self.TARGET - self._ema_ready) / self.TARGET
        low, high = self.INTEGRAL
        self._integral = min(max(self._integral + error * dt, low), high)
        u = self.KP * error + self.KI * self._integral
        multiplier = min(max(1 + u, self.MULTIPLIER[0]), self.MULTIPLIER[1])
        self._interval = min(max(feed_forward / multiplier, self.INTERVAL_S[0]), self.INTERVAL_S[1])
