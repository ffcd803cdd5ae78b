"""The PI law of pacer's controller: a Smith predictor's memory, and PI on its prediction error.

The controller projects the ready depth one synthesis lead time ahead, q̂ = q + s − λ̂·T̂syn.
``Predictions`` keeps each prediction and, one lead time later, gives the prediction error
ε = q − q̃(t − T̂syn) against the ready depth then observed. ``PILaw`` holds the integral of ε
and does all of the PI arithmetic: the correction c = kp·ε + ki·∫ε dt ÷ T̂syn of the projection,
the dispatch-rate multiplier clamp(1 + (q* − q̃) ÷ q*) of the corrected projection q̃ = q̂ + c,
and the bumpless transfers (new gains, the end of manual mode) that seed the integral.

A Smith predictor corrects its model, not the process: where the model is right, ε stays near
zero, and so do kp's and ki's terms whatever their values. They act where the model is biased
(a T̂syn measured short, a T̂gpu that lags a change); the ready buffer (the setpoint) is the
knob that acts where it is not (docs/decisions/controller.md, D19).
"""

from __future__ import annotations

import math
from collections import deque

from pacer.config import ControllerSettings


def clamp(value: float, low: float, high: float) -> float:
    return min(max(value, low), high)


class Predictions:
    """Predictions of the ready depth, by time, compared with it one lead time later.

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
        """Keep ``predicted`` (q̃ after this decision's dispatch) to compare a lead time on."""
        last = self._items[-1][0] if self._items else -math.inf
        if now - last >= lead_s / self.KEEP:
            self._items.append((now, predicted))

    def forget(self) -> None:
        """Nothing paced, or another model: no prediction to hold the ready depth to."""
        self._items.clear()
        self._matched = None

    def error(self, now: float, lead_s: float, ready: int, idle_workers: int) -> float:
        """ε = q − q̃(t − T̂syn): the ready depth observed now less what was predicted for now
        one lead time ago (0 until a prediction is that old). An empty ready queue tells only
        that the prediction was too high (q̃ may be negative, q cannot), and a GPU worker idle
        on it that it was too high by at least one partition."""
        while self._items and self._items[0][0] <= now - lead_s:
            self._matched = self._items.popleft()[1]
        if self._matched is None:
            return 0.0
        if ready > 0:  # a prediction below zero is only a shortfall: q cannot go there
            return ready - max(self._matched, 0.0)
        return min(-self._matched, -float(idle_workers))


class PILaw:
    """PI on the prediction error, and the rate multiplier of the corrected projection.

    The integral runs in lead times (``step``'s ``dt_leads``), the loop's delay, so that ki
    means the same on any host: the share of a persistent bias removed each lead time.

    >>> law = PILaw(ControllerSettings(kp=0.5, ki=0.2))
    >>> law.step(error=-2.0, dt_leads=1.0, multiplier=1.0, blocked=False)
    >>> law.terms(error=-2.0)  # (kp·ε, ki·∫ε): partitions added to the projection
    (-1.0, -0.4)
    >>> law.multiplier(projected=4.0, setpoint=8.0)  # half the buffer short: 1.5 × the base rate
    1.5
    """

    def __init__(self, settings: ControllerSettings) -> None:
        self.settings = settings
        self.integral = 0.0  # ∫ε dt ÷ T̂syn (partition-leads)

    def terms(self, error: float) -> tuple[float, float]:
        """(kp·ε, ki·∫ε): the P and I terms of the correction (partitions)."""
        return self.settings.kp * error, self.settings.ki * self.integral

    def multiplier(self, projected: float, setpoint: float) -> float:
        """The dispatch-rate multiplier clamp(1 + (q* − q̃) ÷ q*) of the base rate."""
        s = self.settings
        return clamp(1 + (setpoint - projected) / setpoint, s.multiplier_min, s.multiplier_max)

    def step(self, error: float, dt_leads: float, multiplier: float, *, blocked: bool) -> None:
        """Integrate ``error`` over ``dt_leads`` lead times.

        Anti-windup: no integration while the output is saturated in the error's direction
        (the multiplier at a clamp, or dispatch ``blocked``: a cap full, no worker consuming),
        and the integral stays within its clamps.
        """
        s = self.settings
        saturated_up = blocked or multiplier >= s.multiplier_max
        saturated_down = multiplier <= s.multiplier_min
        if (error < 0 and saturated_up) or (error > 0 and saturated_down):
            return
        self.integral = clamp(self.integral + error * dt_leads, s.integral_min, s.integral_max)

    def seed(self, correction: float, error: float) -> None:
        """Set the integral so that kp·ε + ki·∫ε comes to ``correction`` (a bumpless
        transfer), within the integral's clamps; without ki it is only clamped."""
        s = self.settings
        wanted = (correction - s.kp * error) / s.ki if s.ki > 0 else self.integral
        self.integral = clamp(wanted, s.integral_min, s.integral_max)

    def retune(self, settings: ControllerSettings, error: float, *, keep: bool) -> None:
        """Take new gains and limits; with ``keep``, the correction keeps its value."""
        correction = sum(self.terms(error))
        self.settings = settings
        if keep:
            self.seed(correction, error)
        else:
            self.integral = clamp(self.integral, settings.integral_min, settings.integral_max)

    def correction_for(self, multiplier: float, setpoint: float, model: float) -> float:
        """The correction under which an uncorrected projection ``model`` gives the rate
        ``multiplier``: q̃ = q*·(2 − m), less the model; at most q* either way (a manual rate
        that starved the GPUs is no evidence of a model that under-predicts)."""
        return clamp(setpoint * (2 - multiplier) - model, -setpoint, setpoint)

    def reset(self) -> None:
        """Forget the integral: it belongs to another regime."""
        self.integral = 0.0
