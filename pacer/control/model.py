"""The controller's model of the pipeline: the feed-forward, the lead time and the setpoint.

From the estimates (``pacer.control.estimates``) and the GPU workers consuming: the base
interval T̂gpu ÷ W (the feed-forward: dispatch at the rate the GPUs consume), the lead time the
projection looks ahead, the effective setpoint q*, and the Little's-law depth a refill fills to.
"""

from __future__ import annotations

import math

from pacer.config import ControllerSettings
from pacer.control.estimates import Estimator
from pacer.control.handoff import Handoff
from pacer.control.occupancy import Occupancy
from pacer.control.policy import Caps
from pacer.control.rate_dispatch import QUEUE_SIGMAS, executor_queue


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

    BALANCE_FROM = 0.5  # the near-balance buffer counts where a refill takes this × T̂syn
    BALANCE_FULL = 1.0  # ... and in full from this × T̂syn
    OCCUPANCY_LEADS = 4.0  # the processes' occupancy is averaged over this × T̂syn

    def __init__(
        self,
        estimator: Estimator,
        settings: ControllerSettings,
        caps: Caps | None = None,
        queue_sigmas: float = QUEUE_SIGMAS,
    ) -> None:
        self.estimator = estimator
        self.settings = settings
        self.caps = caps  # the host's synthesis slots and memory; None: unknown
        self.queue_sigmas = queue_sigmas
        self.occupancy = Occupancy()
        self.handoff = Handoff()  # how the synthesis time divides, where the host measures it
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
        setpoint = max(s.target_ready, buffer, s.spread_sigmas * spread)
        return max(setpoint, self.near_balance(rate, setpoint))

    def observe_synthesizing(self, now: float, synthesizing: int) -> None:
        """Take in the syntheses in flight (dispatched, not yet ready) from ``now`` on, for
        the processes' occupancy (`Occupancy`)."""
        if self.caps is not None:
            tau = self.OCCUPANCY_LEADS * (self.estimator.synthesis_s or 0.0)
            slots = self.caps.synthesis_concurrency
            self.occupancy.observe(now, synthesizing=synthesizing, processes=slots, tau_s=tau)

    def process_s(self) -> float:
        """The synthesis processes' own time a synthesis (s): T̂syn × the share of it spent on
        a synthesis thread, where the host measures it (`Handoff.process_share`), else T̂syn;
        0 while T̂syn is unknown."""
        syn = self.estimator.synthesis_s
        if not syn or syn <= 0:
            return 0.0
        return syn * (self.handoff.process_share or 1.0)

    def slots_rate(self) -> float:
        """Partitions a second the synthesis slots finish with every one busy: slots ÷ the
        slots' own time a synthesis, T̂syn × the share of it spent in a process: as measured
        (`Handoff.process_share`), else `Occupancy.busy_share` (T̂syn holds the wait in front
        of them and the hand-off); 0 while T̂syn or the caps are unknown."""
        syn, caps = self.estimator.synthesis_s, self.caps
        if not syn or syn <= 0 or caps is None:
            return 0.0
        share = self.handoff.process_share or self.occupancy.busy_share
        return caps.synthesis_concurrency / (syn * share)

    def synthesis_queue(self) -> int:
        """Partitions allowed to wait in front of the synthesis processes: `executor_queue` of
        the spread of synthesis times and of the partitions the hand-off keeps on their way
        (the slots' rate × `Handoff.trip_s`); 0 while T̂syn or the caps are unknown, and where
        a synthesis beyond the cap would share the cores instead of waiting
        (``Caps.synthesis_queue``)."""
        if self.caps is None or not self.caps.synthesis_queue:
            return 0
        return self._executor_queue(self.slots_rate() * self.handoff.trip_s)

    def ends_bunched(self) -> int:
        """How far the synthesis slots' ends may run ahead of their mean count over one
        synthesis: `executor_queue` of the concurrency cap and the spread of synthesis times;
        0 while T̂syn or the caps are unknown."""
        return self._executor_queue(0.0)

    def _executor_queue(self, in_transit: float) -> int:
        """`executor_queue` of the concurrency cap, the spread of synthesis times and
        ``in_transit`` partitions; 0 while T̂syn or the caps are unknown."""
        syn, caps = self.estimator.synthesis_s, self.caps
        if not syn or syn <= 0 or caps is None:
            return 0
        return executor_queue(caps.synthesis_concurrency, self.estimator.synthesis_cv,
                              self.queue_sigmas, in_transit)  # fmt: skip

    def near_balance(self, rate_per_s: float, setpoint: float) -> float:
        """The setpoint where the synthesis slots barely outpace the GPUs (partitions; 0 where
        they have slots to spare, or ``near_balance_idle`` is 0).

        With every slot busy the ready queue gains μ = slots ÷ T̂syn − λ̂ a second and wanders
        by v = ``Estimator.flow_variance`` a second: a random walk that leaves the GPUs idle
        μ ÷ (exp(2μB ÷ v) − 1) of a second each second above a buffer B. B is sized for a
        share ``near_balance_idle`` of that idle: v ÷ 2μ × ln(1 + μ ÷ (idle × λ̂)). It is
        weighed in where ``setpoint`` takes half of T̂syn or more to refill at μ, in full at
        T̂syn; where μ ≤ 0 (synthesis is the bottleneck) it is the memory budget,
        so that every slot stays busy. At most the memory budget. The slots' rate is
        `slots_rate`: the concurrency cap over their own time a synthesis, without the wait
        in front of them.
        """
        idle, caps, syn = self.settings.near_balance_idle, self.caps, self.estimator.synthesis_s
        if not idle or caps is None or not syn or not 0 < rate_per_s < math.inf:
            return 0.0
        budget = float(caps.inflight_partitions)
        surplus = self.slots_rate() - rate_per_s
        if surplus <= 0:
            return budget
        low, high = self.BALANCE_FROM, self.BALANCE_FULL
        weight = min(1.0, max(0.0, (setpoint / (surplus * syn) - low) / (high - low)))
        if weight <= 0:
            return 0.0
        variance = self.estimator.flow_variance(rate_per_s)
        buffer = variance / (2 * surplus) * math.log1p(surplus / (idle * rate_per_s))
        return min(budget, setpoint + weight * max(0.0, buffer - setpoint))

    def little_depth(self, workers: int, lead_s: float) -> int:
        """Partitions in flight that keep ``workers`` busy with q* waiting, the lead time
        ``lead_s``: ceil(T̂syn ÷ base interval + q*)."""
        if self.estimator.gpu_service_s is None:
            raise ValueError("little_depth needs a GPU service-time estimate")
        base, setpoint = self.at(workers)
        return math.ceil(lead_s / base + setpoint)
