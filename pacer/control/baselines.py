"""Baseline dispatch policies: what pacer's controller is compared against.

- ``Unpaced``: dispatch whenever the memory budget allows.
- ``FixedConcurrency``: keep a constant number of partitions in flight (the simulator's
  ``fixed``: a static setting tuned with knowledge of the scenario that a live system lacks).
- ``CuzkPacer``: the cuzk proving engine's dispatch loop with its DispatchPacer, ported rule by
  rule from its source: the reference to beat (``cuzk``); with setpoint 0, the same loop as
  cuzk ships it, pacer off (``cuzk-default``).

They implement ``DispatchPolicy`` (``pacer.control.policy``) like the PI controller does, so the
simulator and the service's dispatch loop drive them alike (``PACER_CONTROLLER__POLICY`` =
``unpaced``, ``cuzk`` or ``cuzk-default`` for the service). Like the controller they are pure:
a function of observations and, for ``CuzkPacer``, an injected clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import Enum

from pacer.control.policy import Decision, Mode, Observation, SynthesisParts


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
    synthesis_workers: int | None = None
    _last_obs: Observation | None = None

    @property
    def mode(self) -> Mode:
        return _mode(self._last_obs)

    def observe_gpu_service(self, seconds: float) -> None:
        pass

    def observe_synthesis(self, seconds: float, parts: SynthesisParts | None = None) -> None:
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


class _Waiting(Enum):
    """Where cuzk's dispatch loop is waiting (the ``await`` it sits in)."""

    FIRST_GPU = "first GPU completion"  # bootstrap sent before any GPU time was known
    BOOTSTRAP = "bootstrap timer or a GPU completion"
    PACING = "pacing timer"  # a GPU completion starts a new pass instead
    WORK = "work"  # nothing in the backlog
    BUDGET = "memory budget"
    CHANNEL = "room in the synthesis channel"


class CuzkPacer:
    """cuzk's synthesis dispatcher, ported rule by rule from its source onto pacer's policy
    interface.

    Source: github.com/filecoin-project/curio at e0294b0f948132d41e8f42f59fa949495d5fd3af,
    ``extern/cuzk/cuzk-core/src/engine.rs`` (blob 9511060; unchanged since 3f74a5cd, where the
    engine came in) and ``extern/cuzk/cuzk-core/src/config.rs`` (blob 555f64b). ``engine.rs:N``
    below is a line of that file. cuzk runs one dispatcher task that loops; this class keeps
    where that loop is waiting and advances it, at the clock's time, on each ``decide``. The
    task starts with the engine: the first pass runs when the policy is built.

    Settings and state:

    - ``target`` is ``pipeline.max_gpu_queue_depth`` (engine.rs:1450): 0, the shipped default
      (config.rs:340, 364-366), turns the pacer off; 8 is the "recommended starting point"
      (config.rs:341), the setpoint of ``cuzk``.
    - Constants of ``DispatchPacer::new`` (engine.rs:168-207): waiting EMA weight 0.15, GPU EMA
      weight 0.2, kp 0.5, ki 0.001, integral clamped to [−20, +100], ``target`` bootstrap
      partitions. GPU workers: all of them (engine.rs:1505), here the observation's count.

    One pass of the loop (engine.rs:1507-1673), only while ``target`` > 0 for the pacer parts:

    1. ``update`` (engine.rs:1509-1514, 210-260) on every pass: the GPU time EMA takes the mean
       processing time of the completions since the last update (the first one sets it,
       engine.rs:213-229); PV = EMA of the partitions waiting for a GPU (engine.rs:251-252);
       the integral adds the normalized error (target − PV) ÷ target × dt, dt at least 1 ms,
       and is clamped (engine.rs:255-259). The integral runs in bootstrap too.
    2. Re-bootstrap check, right after the update of each pass (engine.rs:1518-1525,
       307-312): GPU rate known, no bootstrap partition left, PV < 1 and every dispatched
       partition through its GPU work. It sets ``target`` bootstrap partitions and zeroes the
       integral; the GPU EMA stays (engine.rs:317-321).
    3. Gate, its interval recomputed on this pass (engine.rs:263-288):
       - initial bootstrap sent before any GPU completion: wait for GPU completions, updating
         on each, until the GPU time is known; then dispatch at once (engine.rs:1530-1555,
         296-298);
       - bootstrap: sleep 3 s while the GPU time is unknown (engine.rs:272), max(2 s, GPU
         time ÷ workers) once it is known (engine.rs:266-270); a GPU completion ends the sleep
         early, with an update, and dispatches too (engine.rs:1556-1574);
       - pacing: sleep max(50 ms, min(60 s, (GPU time ÷ workers) ÷ clamp(1 + kp·e + ki·∫,
         0.3, 3))), whole milliseconds (engine.rs:280-287); a GPU completion abandons the
         sleep and starts a new pass, so each completion restarts the timer
         (engine.rs:1575-1593).
    4. Take the next partition; with none, wait for work, updating on each GPU completion
       (engine.rs:1595-1621). Work that arrives is dispatched at once: the gate is behind.
    5. Wait for the memory budget (engine.rs:1628). pacer's budget holds a partition from here
       until its GPU work ends, for every policy; cuzk gives the a, b, c part back when the
       GPU call starts (engine.rs:3166, 3202).
    6. Send it into the synthesis channel, waiting while the channel is full
       (engine.rs:1647); count it, one bootstrap partition fewer (engine.rs:1651, 323-328).

    GPU completions wake the loop through a ``tokio::sync::Notify`` (engine.rs:1451) signalled
    with ``notify_one`` (engine.rs:3215-3216): one that comes while the loop waits elsewhere
    (steps 5 and 6) is kept as a single permit and taken by the next wait that listens.

    Synthesis: ``max(2, min(budget ÷ partition, max_parallel_synthesis))`` workers
    (engine.rs:1413, 1433-1437; ``max_parallel_synthesis`` 0 means 18, config.rs:296,
    358-360) take partitions from a channel of as many places (engine.rs:1474-1476, 1678).
    ``synthesis_workers`` tells the simulator to run no more than that at once; the policy
    itself keeps at most twice that dispatched and not yet synthesized (the workers and the
    channel). The service runs dispatched partitions on its own synthesis executor.

    Not ported: the synthesis-rate EMA (engine.rs:231-248: logged, never used), logging, the
    check for a job failed meanwhile (engine.rs:1630-1644), a failed GPU call counted as a
    completion of no time (engine.rs:3207-3216: pacer reports only proved partitions).
    """

    TARGET = 8
    ALPHA_READY = 0.15
    ALPHA_GPU = 0.2
    KP = 0.5
    KI = 0.001
    INTEGRAL = (-20.0, 100.0)
    MULTIPLIER = (0.3, 3.0)
    INTERVAL_MS = (50.0, 60000.0)
    BOOTSTRAP_SPACING_S = 3.0  # while no GPU time is known
    BOOTSTRAP_MIN_SPACING_S = 2.0  # once it is
    MAX_PARALLEL_SYNTHESIS = 18

    def __init__(
        self,
        memory_slots: int,
        clock: Callable[[], float],
        *,
        target: int = TARGET,
        max_parallel_synthesis: int = MAX_PARALLEL_SYNTHESIS,
    ) -> None:
        if target < 0:
            raise ValueError(f"target must be at least 0 (0: pacer off), got {target}")
        if max_parallel_synthesis < 1:
            raise ValueError(
                f"max_parallel_synthesis must be at least 1, got {max_parallel_synthesis}"
            )
        self._slots = memory_slots
        self._clock = clock
        self._target = target
        self._workers_synth = max(2, min(memory_slots, max_parallel_synthesis))
        self._gpu_workers = 1
        # DispatchPacer state (engine.rs:167-207).
        self._ema_ready = 0.0
        self._gpu_ema_s = 1.0
        self._gpu_known = False
        self._gpu_count = 0  # the completion counter and the processing-time sum the GPU
        self._gpu_total_s = 0.0  # workers add to (engine.rs:3208-3215)
        self._prev_count = 0
        self._prev_total_s = 0.0
        self._integral = 0.0
        self._boot_left = target
        self._dispatched = 0
        self._rebootstraps = 0
        self._gpu_permit = False
        self._last_obs: Observation | None = None
        now = clock()
        self._last_update = now
        self._due = now
        # The dispatcher starts with the engine: its first pass runs now, with nothing waiting.
        self._waiting = _Waiting.WORK
        self._pass(now, 0)

    # -- what the pipeline and metrics read --------------------------------------------

    @property
    def mode(self) -> Mode:
        """``bootstrap`` while bootstrap partitions are left or no GPU time is known."""
        if _mode(self._last_obs) is Mode.DRAINED:
            return Mode.DRAINED
        if self._target > 0 and (self._boot_left > 0 or not self._gpu_known):
            return Mode.BOOTSTRAP
        return Mode.PACING

    @property
    def bootstraps(self) -> int:
        return 1 if self._target > 0 else 0

    @property
    def rebootstraps(self) -> int:
        return self._rebootstraps

    @property
    def synthesis_workers(self) -> int:
        """cuzk's synthesis worker pool: max(2, min(memory slots, max_parallel_synthesis))."""
        return self._workers_synth

    def observe_synthesis_failure(self, elapsed_s: float) -> None:
        pass

    def interval_s(self) -> float:
        """The interval the loop would sleep on a pass now (s); 0 with the pacer off."""
        return 0.0 if self._target == 0 else self._interval()

    def observe_gpu_service(self, seconds: float) -> None:
        self._gpu_count += 1
        self._gpu_total_s += seconds
        self._gpu_permit = True

    def observe_synthesis(self, seconds: float, parts: SynthesisParts | None = None) -> None:
        pass  # cuzk's synthesis EMA is only logged

    # -- the loop ----------------------------------------------------------------------

    def decide(self, obs: Observation) -> Decision:
        """Run the loop at the clock's time until it waits; dispatch what it sent meanwhile."""
        now = self._clock()
        self._last_obs = obs
        self._gpu_workers = max(1, obs.gpu_workers)
        sent = 0
        while True:
            waiting = self._waiting
            if waiting is _Waiting.FIRST_GPU:
                if not self._take_permit():
                    break
                self._update(now, obs.ready)
                if self._gpu_known:
                    self._waiting = _Waiting.WORK
            elif waiting is _Waiting.BOOTSTRAP:
                if self._take_permit():
                    self._update(now, obs.ready)
                elif now < self._due:
                    break
                self._waiting = _Waiting.WORK
            elif waiting is _Waiting.PACING:
                if self._take_permit():
                    self._pass(now, obs.ready)
                elif now < self._due:
                    break
                else:
                    self._waiting = _Waiting.WORK
            elif waiting is _Waiting.WORK:
                if obs.backlog - sent > 0:
                    self._waiting = _Waiting.BUDGET
                    continue
                if self._take_permit() and self._target > 0:
                    self._update(now, obs.ready)
                break
            elif waiting is _Waiting.BUDGET:
                if obs.inflight + sent >= self._slots:
                    break
                self._waiting = _Waiting.CHANNEL
            else:  # CHANNEL: the workers and the channel's places are all taken
                if obs.synthesizing + sent >= 2 * self._workers_synth:
                    break
                sent += 1
                self._dispatched += 1
                self._boot_left = max(0, self._boot_left - 1)
                self._pass(now, obs.ready)
        timed = self._waiting in (_Waiting.BOOTSTRAP, _Waiting.PACING)
        return Decision(sent, self._due if timed else None)

    def _take_permit(self) -> bool:
        permit, self._gpu_permit = self._gpu_permit, False
        return permit

    def _pass(self, now: float, ready: int) -> None:
        """The top of the loop: update, re-bootstrap check, and the gate to wait in."""
        if self._target == 0:
            self._waiting = _Waiting.WORK
            return
        self._update(now, ready)
        if (
            self._gpu_known
            and self._boot_left == 0
            and self._ema_ready < 1.0
            and self._dispatched <= self._gpu_count
        ):
            self._boot_left = self._target
            self._integral = 0.0
            self._rebootstraps += 1
        if not self._gpu_known and self._boot_left == 0:
            self._waiting = _Waiting.FIRST_GPU
        else:
            self._due = now + self._interval()
            self._waiting = _Waiting.BOOTSTRAP if self._boot_left > 0 else _Waiting.PACING

    def _update(self, now: float, ready: int) -> None:
        new = self._gpu_count - self._prev_count
        if new > 0:
            mean_s = (self._gpu_total_s - self._prev_total_s) / new
            if mean_s > 0:
                if self._gpu_known:
                    self._gpu_ema_s += self.ALPHA_GPU * (mean_s - self._gpu_ema_s)
                else:
                    self._gpu_ema_s = mean_s
                    self._gpu_known = True
            self._prev_count, self._prev_total_s = self._gpu_count, self._gpu_total_s
        self._ema_ready += self.ALPHA_READY * (ready - self._ema_ready)
        dt = max(now - self._last_update, 0.001)
        error = (self._target - self._ema_ready) / self._target
        low, high = self.INTEGRAL
        self._integral = min(max(self._integral + error * dt, low), high)
        self._last_update = now

    def _interval(self) -> float:
        gpu_eff_s = self._gpu_ema_s / self._gpu_workers
        if self._boot_left > 0:
            if self._gpu_known:
                return max(gpu_eff_s, self.BOOTSTRAP_MIN_SPACING_S)
            return self.BOOTSTRAP_SPACING_S
        if not self._gpu_known:
            return self.BOOTSTRAP_SPACING_S
        error = (self._target - self._ema_ready) / self._target
        multiplier = min(max(1 + self.KP * error + self.KI * self._integral,
                             self.MULTIPLIER[0]), self.MULTIPLIER[1])  # fmt: skip
        ms = min(max(gpu_eff_s / multiplier * 1000.0, self.INTERVAL_MS[0]), self.INTERVAL_MS[1])
        return math.floor(ms) / 1000.0
