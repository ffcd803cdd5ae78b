"""The controller's model of the pipeline: the feed-forward, the lead time and the setpoint.

From the estimates (``pacer.control.estimates``) and the GPU workers consuming: the base
interval T̂gpu ÷ W (the feed-forward: dispatch at the rate the GPUs consume), the lead time the
projection looks ahead, the effective setpoint q*, and the Little's-law depth a refill fills to.
"""

from __future__ import annotations

import math

from pacer.config import ControllerSettings
from pacer.control.estimates import Estimator


class Model:
    """The feed-forward and setpoint for a number of workers, recomputed only when an estimate,
    the workers or the settings changed; the lead time each time (the cold cohort's bound and
    the live floor move with the clock).

    >>> from pacer.control.estimates import Estimates
    >>> m = Model(Estimator(64, 64, Estimates(2.0, 30.0)), ControllerSettings())
    >>> m.at(workers=2)  # (base interval T̂gpu ÷ W, q*)
    (1.0, 8.0)
    >>> m.little_depth(workers=2, lead_s=30.0)  # ceil(30 ÷ 1 + 8)
    38
    """

    def __init__(self, estimator: Estimator, settings: ControllerSettings) -> None:
        self.estimator = estimator
        self.settings = settings
        self._key: tuple[int, int, int] | None = None
        self._cache = (1.0, settings.target_ready)

    @staticmethod
    def base(gpu_s: float, workers: int) -> float:
        """The feed-forward interval T̂gpu ÷ W (s); infinite without a worker consuming."""
        return math.inf if workers <= 0 else max(gpu_s / workers, 1e-9)

    def at(self, workers: int) -> tuple[float, float]:
        """(base interval, setpoint q*) for ``workers`` consuming."""
        key = (self.estimator.version, workers, id(self.settings))
        if key != self._key:
            base = self.base(self.estimator.gpu_service_s or 0.0, workers)
            self._cache = (base, self.setpoint(base))
            self._key = key
        return self._cache

    def setpoint(self, base_interval_s: float) -> float:
        """The effective setpoint q* (partitions): the ready buffer of ``target_ready_s`` of
        GPU work (÷ the base interval), at least ``target_ready``, and more where the spread
        of synthesis and GPU times makes the ready queue wander further (``spread_sigmas``)."""
        s, est = self.settings, self.estimator
        rate = 1 / base_interval_s
        spread = est.ready_wander_sd(rate, est.synthesis_s or 0.0)
        buffer = s.target_ready_s * rate if math.isfinite(rate) else 0.0
        return max(s.target_ready, buffer, s.spread_sigmas * spread)

    def little_depth(self, workers: int, lead_s: float) -> int:
        """Partitions in flight that keep ``workers`` busy with q* waiting, the lead time
        ``lead_s``: ceil(T̂syn ÷ base interval + q*)."""
        if self.estimator.gpu_service_s is None:
            raise ValueError("little_depth needs a GPU service-time estimate")
        base, setpoint = self.at(workers)
        return math.ceil(lead_s / base + setpoint)
