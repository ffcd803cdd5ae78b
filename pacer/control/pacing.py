"""The law at work: from an observation to the terms of a decision (``Terms``).

``Pacing`` holds what the law keeps between decisions: the Smith predictor's projections
(``Predictions``), the filtered mismatch and the integral (``PILaw``), and the model of the
pipeline (``Model``: the feed-forward, the setpoint). Each decision it takes in the mismatch,
steps the integral, and gives the projection, its errors, the P and I terms and the rate.
The controller (``pacer.control.controller``) turns the rate into dispatches under the caps
and the safety ceiling.
"""

from __future__ import annotations

import math

from pacer.config import ControllerSettings
from pacer.control.estimates import Estimator
from pacer.control.model import Model
from pacer.control.pi_law import PILaw, Predictions
from pacer.control.policy import Caps, Mode, Observation, Terms
from pacer.control.rate_dispatch import QUEUE_SIGMAS


class Pacing:
    """The projections, the mismatch and the integral of one controller, and its terms.

    >>> from pacer.control.estimates import Estimates
    >>> p = Pacing(ControllerSettings(kp=1.0), Estimator(64, 64, Estimates(2.0, 30.0)))
    >>> t = p.terms(Observation(ready=0, synthesizing=30, gpu_busy=2, gpu_workers=2,
    ...                         backlog=100), workers=2, lead_s=30.0, hung=0)
    >>> t.projected_ready, t.p_term, round(t.multiplier, 4)  # 8 short: 8 more a lead time
    (0.0, 8.0, 1.2667)
    """

    def __init__(
        self,
        settings: ControllerSettings,
        estimator: Estimator,
        caps: Caps | None = None,
        queue_sigmas: float = QUEUE_SIGMAS,
    ) -> None:
        self._est = estimator
        estimator.floor_longest = settings.live_floor_longest
        self.model = Model(estimator, settings, caps, queue_sigmas)
        self.law = PILaw(settings)
        self.predictions = Predictions()  # q̂ after each dispatch, to compare a lead later

    @property
    def settings(self) -> ControllerSettings:
        return self.law.settings

    def take_in(self, now: float, dt: float, lead_s: float, ready: int, idle_workers: int) -> None:
        """Take in the mismatch: the ready depth observed now against the projection made a
        lead time ago (``Predictions``), filtered over a lead time (``PILaw.filter``)."""
        mismatch = self.predictions.error(now, lead_s, ready, idle_workers)
        self.law.filter(mismatch, dt / max(lead_s, 1e-9))

    def terms(
        self, obs: Observation, *, workers: int, lead_s: float, hung: int, held: int = 0
    ) -> Terms:
        """The terms of ``obs`` with ``workers`` consuming, ``lead_s`` ahead, ``hung``
        syntheses left out: the projection q̂, the Smith-predicted depth q̃ = q̂ + ε̄, the
        P term on q* − q̂, the I term, and the rate around the feed-forward. With ``held``
        workers lost whose pipeline is kept (``WorkerHold``), q* rises by the depth their
        share held: Little's depth of ``workers + held`` less that of ``workers``."""
        s = self.settings
        base, setpoint = self.model.at(workers)
        if held > 0 and workers > 0:
            base_held, setpoint_held = self.model.at(workers + held)
            setpoint = lead_s / base_held + setpoint_held - lead_s / base
        model = obs.ready + obs.synthesizing - hung - lead_s / base
        mismatch = self.law.mismatch
        projected = model + mismatch
        error = setpoint - projected
        p_term, i_term = self.law.terms(setpoint - model, error)
        multiplier, interval = self._rated(base, lead_s, p_term + i_term)
        mode = Mode.BOOTSTRAP if self._est.cold_cohort_open else Mode.PACING
        return Terms(mode, projected, setpoint, error, p_term, i_term,
                     min(base, s.interval_max_s), multiplier, interval, math.inf, lead_s,
                     workers, mismatch, hung, self._est.live_floor_s(),
                     self._est.slowdown, held)  # fmt: skip

    def stepped(self, terms: Terms) -> Terms:
        """``terms`` after ``integrate``: the I term of the integral as it is now, and the
        multiplier and interval with it; the projection, its errors and the P term are those
        ``terms`` holds (the integral moves nothing else)."""
        i_term = self.law.terms(0.0, terms.error)[1]
        base = self.model.at(terms.gpu_workers)[0]
        multiplier, interval = self._rated(base, terms.lead_s, terms.p_term + i_term)
        return terms._replace(i_term=i_term, multiplier=multiplier, interval_s=interval)

    def _rated(self, base: float, lead_s: float, correction: float) -> tuple[float, float]:
        """(multiplier, interval s) of the rate around the feed-forward 1 ÷ ``base`` with the
        P and I terms' ``correction`` (``PILaw.rate``)."""
        feed_forward = 1 / base
        rate = self.law.rate(feed_forward, lead_s, correction)
        multiplier = rate / feed_forward if feed_forward > 0 else 1.0
        return multiplier, min(1 / rate if rate > 0 else math.inf, self.settings.interval_max_s)

    def integrate(self, terms: Terms, dt: float, *, blocked: bool) -> None:
        """Step the integral of e over ``dt`` (``PILaw.step``), held where the rate is at a
        clamp or a cap ``blocked`` dispatch; held either way while no worker consumes (a GPU
        stalled or lost: the ready queue's rise then says nothing of the model, D189)."""
        s = self.settings
        stopped = terms.gpu_workers == 0
        self.law.step(
            terms.error,
            dt / max(terms.lead_s, 1e-9),
            saturated_up=blocked or terms.multiplier >= s.multiplier_max or stopped,
            saturated_down=terms.multiplier <= s.multiplier_min or stopped,
        )

    def keep(self, now: float, terms: Terms, dispatched: int) -> None:
        """Keep the projection after this decision's ``dispatched`` partitions (q̂, the
        model's own, without the mismatch) to compare with the ready depth a lead later."""
        model = terms.projected_ready - terms.mismatch
        self.predictions.keep(now, terms.lead_s, model + dispatched)

    def forget(self) -> None:
        """Another model, or a restart: the projections, the mismatch and the integral
        belong to the old one."""
        self.predictions.forget()
        self.law.reset()

    def retune(self, settings: ControllerSettings, terms: Terms, *, keep: bool) -> None:
        """New settings; with ``keep`` the correction keeps its value (``PILaw.retune``)."""
        self.model.settings = settings
        self._est.floor_longest = settings.live_floor_longest
        self.law.retune(settings, terms.error + terms.mismatch, keep=keep)

    def leave_manual(self, interval_s: float, terms: Terms) -> None:
        """Back from a manual ``interval_s``: seed the integral so that the rate starts at
        the manual one (``PILaw.seed``)."""
        correction = PILaw.correction_for(1 / interval_s, 1 / terms.ff_interval_s, terms.lead_s)
        self.law.seed(correction, terms.error + terms.mismatch)
