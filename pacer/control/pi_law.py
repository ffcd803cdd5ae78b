"""The PI law of pacer's controller: a Smith predictor's projection, and PI on its error.

The controller projects the ready depth one synthesis lead time ahead, q̂ = q + s − λ̂·T̂syn
(a model without delay: a dispatch shows in it at once). ``Predictions`` keeps each projection
and, one lead time later, gives the mismatch ε = q − q̂(t − T̂syn) against the ready depth then
observed (a Smith predictor's correction for what the model gets wrong). ``PILaw`` holds the
mismatch, filtered over a lead time, the integral, and does all of the PI arithmetic:

- the Smith-predicted ready depth q̃ = q̂ + ε̄ and its error e = q* − q̃ (partitions);
- the dispatch rate r = λ̂ + (kp·(q* − q̂) + ki·∫e dt ÷ T̂syn) ÷ T̂syn around the feed-forward
  λ̂ (the rate the GPUs consume). P acts on the projection at once: kp is the share of a
  shortfall refilled each lead time. I acts on the Smith-predicted depth: ki is the share of
  a persistent error (the model's bias, shown by the mismatch) removed each lead time; the
  integral runs in lead times, the loop's delay. The mismatch is the ready queue's wander,
  seen a lead time late: at kp's pace it would be noise, so only the integral takes it;
- anti-windup, and the bumpless transfers (new gains, the end of manual mode).

docs/decisions/controller.md, D131 and D132, has why.
"""

from __future__ import annotations

import math
from collections import deque

from pacer.config import ControllerSettings


def clamp(value: float, low: float, high: float) -> float:
    return min(max(value, low), high)


class Predictions:
    """Projections of the ready depth, by time, compared with it one lead time later.

    At most ``KEEP`` are kept, one per lead ÷ ``KEEP`` seconds.

    >>> p = Predictions()
    >>> p.keep(0.0, 10.0, 5.0)
    >>> p.error(now=10.0, lead_s=10.0, ready=3, idle_workers=0)  # 3 observed, 5 predicted
    -2.0
    """

    KEEP = 128

    def __init__(self) -> None:
        self._items: deque[tuple[float, float]] = deque(maxlen=self.KEEP)
        self._matched: float | None = None  # the prediction made one lead time ago

    def keep(self, now: float, lead_s: float, predicted: float) -> None:
        """Keep ``predicted`` (q̂ after this decision's dispatch) to compare a lead time on."""
        last = self._items[-1][0] if self._items else -math.inf
        if now - last >= lead_s / self.KEEP:
            self._items.append((now, predicted))

    def forget(self) -> None:
        """Nothing paced, or another model: no prediction to hold the ready depth to."""
        self._items.clear()
        self._matched = None

    def error(self, now: float, lead_s: float, ready: int, idle_workers: int) -> float:
        """ε = q − q̂(t − T̂syn): the ready depth observed now less what was predicted for now
        one lead time ago (0 until a prediction is that old). An empty ready queue tells only
        that the prediction was too high (q̂ may be negative, q cannot), and a GPU worker idle
        on it that it was too high by at least one partition."""
        while self._items and self._items[0][0] <= now - lead_s:
            self._matched = self._items.popleft()[1]
        if self._matched is None:
            return 0.0
        if ready > 0:  # a prediction below zero is only a shortfall: q cannot go there
            return ready - max(self._matched, 0.0)
        return min(-self._matched, -float(idle_workers))


class PILaw:
    """P on the projection's error and I on the Smith-predicted depth's error; the dispatch
    rate around the feed-forward.

    At 2 partitions a second and a lead time of 10 s, with 4 partitions short, kp = 1 adds
    0.4 a second (the shortfall closed within about a lead time); ki = 0.5 after one lead time
    of that shortfall adds 0.2 more:

    >>> law = PILaw(ControllerSettings(kp=1.0, ki=0.5))
    >>> law.rate(feed_forward=2.0, lead_s=10.0, correction=sum(law.terms(4.0, 4.0)))
    2.4
    >>> law.step(error=4.0, dt_leads=1.0, saturated_up=False, saturated_down=False)
    >>> round(law.rate(feed_forward=2.0, lead_s=10.0, correction=sum(law.terms(4.0, 4.0))), 6)
    2.6
    """

    def __init__(self, settings: ControllerSettings) -> None:
        self.settings = settings
        self.integral = 0.0  # ∫e dt ÷ T̂syn (partition-leads)
        self.mismatch = 0.0  # ε̄: the Smith predictor's mismatch, filtered over a lead time

    def filter(self, mismatch: float, dt_leads: float) -> float:
        """Take in the mismatch ε observed now, ``dt_leads`` lead times after the last; ε̄, its
        first-order filter with a time constant of one lead time (its noise, the wander of
        the ready queue, does not reach the rate; a model that is off shows within one)."""
        self.mismatch += (mismatch - self.mismatch) * (1 - math.exp(-dt_leads))
        return self.mismatch

    def terms(self, model_error: float, error: float) -> tuple[float, float]:
        """(kp·(q* − q̂), ki·∫e): the P and I terms (partitions, each closed over a lead time).
        ``error`` (e = q* − q̃) is what the integral takes in (``step``)."""
        return self.settings.kp * model_error, self.settings.ki * self.integral

    def rate(self, feed_forward: float, lead_s: float, correction: float) -> float:
        """The dispatch rate (partitions/s): ``feed_forward`` plus the ``correction`` (the P
        and I terms) spread over ``lead_s``, within [multiplier_min, multiplier_max] ×
        ``feed_forward``."""
        s = self.settings
        if not math.isfinite(feed_forward) or feed_forward <= 0:
            return feed_forward
        wanted = feed_forward + correction / max(lead_s, 1e-9)
        return clamp(wanted, s.multiplier_min * feed_forward, s.multiplier_max * feed_forward)

    def step(
        self, error: float, dt_leads: float, *, saturated_up: bool, saturated_down: bool
    ) -> None:
        """Integrate ``error`` over ``dt_leads`` lead times.

        Anti-windup: no integration while the output is saturated in the error's direction
        (``saturated_up``: the rate at its clamp, a cap full, no worker consuming;
        ``saturated_down``: the rate at its lowest, or the ceiling holding dispatch), and the
        integral stays within its clamps.
        """
        s = self.settings
        if (error > 0 and saturated_up) or (error < 0 and saturated_down):
            return
        self.integral = clamp(self.integral + error * dt_leads, s.integral_min, s.integral_max)

    def seed(self, correction: float, model_error: float) -> None:
        """Set the integral so that kp·(q* − q̂) + ki·∫e comes to ``correction`` (a bumpless
        transfer), within the integral's clamps; without ki it is only clamped."""
        s = self.settings
        wanted = (correction - s.kp * model_error) / s.ki if s.ki > 0 else self.integral
        self.integral = clamp(wanted, s.integral_min, s.integral_max)

    def retune(self, settings: ControllerSettings, model_error: float, *, keep: bool) -> None:
        """Take new gains and limits; with ``keep``, the correction keeps its value."""
        correction = sum(self.terms(model_error, 0.0))
        self.settings = settings
        if keep:
            self.seed(correction, model_error)
        else:
            self.integral = clamp(self.integral, settings.integral_min, settings.integral_max)

    @staticmethod
    def correction_for(rate: float, feed_forward: float, lead_s: float) -> float:
        """The correction (P and I terms) under which the law gives ``rate``:
        (rate − λ̂) × T̂syn."""
        return (rate - feed_forward) * lead_s

    def reset(self) -> None:
        """Forget the integral and the mismatch: they belong to another regime."""
        self.integral = 0.0
        self.mismatch = 0.0
