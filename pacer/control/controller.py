"""The dispatch controller: when to start the next synthesis.

Pure and synchronous: a function of observations and an injected clock, so the simulator and
the service drive the very same object. No asyncio, no metrics library.

Model: the *projected* ready depth ``q̂ = q + s − λ̂·T̂syn`` (ready, plus in synthesis, minus
what the GPUs consume during one synthesis lead time, ``λ̂ = W ÷ T̂gpu``) predicts the ready
depth one lead time ahead. A dispatch shows in ``q̂`` at once; the ready depth sees it one
synthesis later.

Correction (a Smith predictor): each prediction is kept, and one lead time later compared with
the ready depth then observed. PI acts on that prediction error ``ε = q − q̃(t − T̂syn)``
(partitions): ``c = kp·ε + ki·∫ε dt ÷ T̂syn``, and the controller steers the corrected
projection ``q̃ = q̂ + c`` to the setpoint ``q*``. The prediction kept is ``q̃`` after the
dispatch it led to, so ε → 0 means the observed ready depth settles at ``q*``. A biased
model (a T̂syn or T̂gpu that lags a change, or is measured short) shows as a persistent ε;
kp answers it at once, ki removes what persists.

Output: order-up-to on ``q̃`` (never more than ``q* + 1 − q̃`` partitions; a shortfall below
zero at once, up to ``q*``; the end of the backlog together), at the rate
``clamp(1 + (q* − q̃) ÷ q*) ÷ base`` where the feed-forward ``base = T̂gpu ÷ W`` dispatches at
the rate the GPUs consume. ``q*`` is the ready buffer in seconds of GPU work,
``target_ready_s ÷ base``, at least ``target_ready`` partitions.

The PI arithmetic is ``pacer.control.pi_law``; dispatch by rate within the caps,
``pacer.control.rate_dispatch``; the cold start and the refills after a drain,
``pacer.control.bootstrap``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from pacer.config import ControllerSettings
from pacer.control.bootstrap import Bootstrap
from pacer.control.estimates import Estimates, Estimator
from pacer.control.pi_law import PILaw, Predictions
from pacer.control.policy import Caps, Decision, Mode, Observation, Terms
from pacer.control.rate_dispatch import RateDispatch

POLICY_FIXED = "policy is chosen at start (PACER_CONTROLLER__POLICY) and cannot be retuned"


class PIController:
    """PI pacing with feed-forward, a synthesis-throughput cap and (re-)bootstrap.

    ``HUNG_FACTOR``: a worker on one partition for longer than this many T̂gpu is not counted
    among the workers consuming (a hung worker, or a stalled GPU, consumes nothing).

    >>> from pacer.control.policy import Caps, Observation
    >>> c = PIController(ControllerSettings(), Caps(48, 50), clock=lambda: 0.0)
    >>> c.decide(Observation(ready=0, synthesizing=0, gpu_busy=0, gpu_workers=2, backlog=100))
    Decision(dispatch=45, next_at=None)
    """

    synthesis_workers: int | None = None  # its caps bound synthesis; no pool of its own
    HUNG_FACTOR = 10.0

    def __init__(
        self,
        settings: ControllerSettings,
        caps: Caps,
        clock: Callable[[], float] = time.monotonic,
        estimates: Estimates | None = None,
    ) -> None:
        self._settings = settings
        self._caps = caps
        self._clock = clock
        self._est = Estimator(
            settings.gpu_window, settings.synthesis_window, estimates or Estimates()
        )
        self._law = PILaw(settings)
        self._predictions = Predictions()  # q̃ after each dispatch, to compare a lead later
        self._rebased = 0  # the estimator's re-basings seen
        self._last_update: float | None = None
        self._rate = RateDispatch(caps)
        self._workers = 1  # GPU workers delivering: live, and not stuck on one partition
        self._manual_interval_s: float | None = None
        self._starts = Bootstrap(caps, warm=estimates is not None and estimates.known)
        self._last_obs: Observation | None = None
        self._model_key: tuple[int, int, int] | None = None
        self._model_cache = (1.0, settings.target_ready)  # (base interval, setpoint)
        self._terms = self._compute(None, 0)

    # -- observations ------------------------------------------------------------------

    @property
    def estimates(self) -> Estimates:
        return self._est.estimates

    @property
    def mode(self) -> Mode:
        return self._terms.mode

    @property
    def bootstraps(self) -> int:
        return self._starts.bootstraps

    @property
    def rebootstraps(self) -> int:
        return self._starts.rebootstraps

    @property
    def integral(self) -> float:
        return self._law.integral

    @property
    def terms(self) -> Terms:
        return self._terms

    @property
    def settings(self) -> ControllerSettings:
        return self._settings

    def interval_s(self) -> float:
        return self._terms.interval_s

    def observe_gpu_service(self, seconds: float) -> None:
        """One partition's GPU service time (s), start of H2D to end of its last kernel."""
        self._est.observe_gpu_service(seconds)

    def observe_synthesis(self, seconds: float) -> None:
        """One partition's synthesis duration (s), dispatch to ready."""
        self._est.observe_synthesis(seconds, self._clock())

    def observe_synthesis_failure(self, elapsed_s: float) -> None:
        """A synthesis failed or timed out ``elapsed_s`` after its dispatch: it leaves the
        cold start's first cohort, and a long one counts toward T̂syn (``Estimator``)."""
        self._est.observe_synthesis_failure(elapsed_s, self._clock())

    def _fit_windows(self, obs: Observation) -> None:
        workers = max(1, obs.gpu_workers)
        gpu = self._est.gpu_service_s
        in_synthesis = math.inf if not gpu else workers * self._est.lead_s(self._clock()) / gpu
        self._est.fit(workers, in_synthesis)

    def live_workers(self, obs: Observation) -> int:
        """GPU workers delivering: the live ones (``obs.gpu_workers``) less those on one
        partition for more than ``HUNG_FACTOR`` × T̂gpu (hung, or stalled with their GPU)."""
        gpu = self._est.gpu_service_s
        if gpu is None or not obs.gpu_busy_ages_s:
            return max(0, obs.gpu_workers)
        limit = self.HUNG_FACTOR * gpu
        stuck = sum(age > limit for age in obs.gpu_busy_ages_s)
        return max(0, obs.gpu_workers - stuck)

    # -- the decision ------------------------------------------------------------------

    def decide(self, obs: Observation) -> Decision:
        """Partitions to dispatch now, and when to ask again at the latest."""
        now = self._clock()
        dt = self._take_in(obs, now)
        room = self._rate.room(obs)
        credit_dt = self._rate.credit_dt(now)
        if self._manual_interval_s is not None:
            self._terms = self._compute(obs, self._workers)
            return self._paced(now, room, self._manual_interval_s, credit_dt, headroom=room)
        self._rate.hold()
        if (start := self._start_decision(obs, now, room)) is not None:
            return start
        self._starts.started()
        self._follow_rebase()
        return self._pace_decision(obs, now, dt, room, credit_dt)

    def _take_in(self, obs: Observation, now: float) -> float:
        """Take in ``obs`` (rate, drain watch, estimates, live workers); seconds since the last."""
        self._last_obs = obs
        dt = 0.0 if self._last_update is None else max(0.0, now - self._last_update)
        self._last_update = now
        self._rate.elapse(dt, self._rate_cap_per_s())
        self._starts.track(obs, now)
        self._fit_windows(obs)
        self._est.observe_running(now, obs.synthesizing, obs.synthesis_ages_s)
        self._workers = self.live_workers(obs)
        return dt

    def _start_decision(self, obs: Observation, now: float, room: int) -> Decision | None:
        """The decision of a start, a refill or an empty backlog; None where pacing decides."""
        if not self._est.known:
            return self._cold_bootstrap(obs, room)
        if self._starts.cold_refill_due:
            # Rates just became known: top the cold start up to the Little's-law depth at once.
            self._starts.top_up(self.little_depth(self._workers), obs.inflight)
        if self._starts.refilling(obs):
            return self._refill(obs, room)
        if obs.backlog == 0:
            self._predictions.forget()  # nothing paced: no prediction to hold the GPUs to
            self._terms = self._compute(obs, self._workers)._replace(
                mode=Mode.DRAINED if obs.inflight == 0 else Mode.PACING
            )
            return Decision(0, None)
        if self._starts.drained(obs, now, self._settings.rebootstrap_hold_s):
            return self._rebootstrap(obs, room)
        return None

    def _follow_rebase(self) -> None:
        """After the model was re-based, forget the predictions made with the old one and the
        integral of their errors: they describe a bias the new estimates removed."""
        if self._est.rebased != self._rebased:
            self._rebased = self._est.rebased
            self._predictions.forget()
            self._law.reset()

    def _pace_decision(
        self, obs: Observation, now: float, dt: float, room: int, credit_dt: float
    ) -> Decision:
        """The PI step, then the output: order-up-to on q̃ at the paced rate."""
        workers = self._workers
        self._terms = terms = self._pace(obs, dt, blocked=room <= 0 or self._rate.tokens < 1)
        if self._est.cold_cohort_open:
            count = self._starts.hold_depth(obs, room, self.bootstrap_depth, self._rate)
            if count > 0:
                return Decision(count, now + terms.interval_s)
        headroom = math.ceil(terms.setpoint + 1 - terms.projected_ready)
        # A projected shortfall (q̃ < 0: the GPUs will run dry within one lead time) goes out
        # at once rather than at the paced rate: each partition of it arrives a lead time
        # after its dispatch, so spreading it out only spreads out the idle time.
        shortfall = 0
        if terms.projected_ready < 0:
            shortfall = math.ceil(terms.setpoint - terms.projected_ready)
        if obs.backlog <= headroom:
            shortfall = obs.backlog  # the end of the backlog: nothing after it to pace for
        if workers == 0:
            headroom = shortfall = 0  # no GPU consumes: nothing to pace
        decision = self._paced(
            now, room, terms.interval_s, credit_dt, headroom=headroom, at_once=shortfall
        )
        if workers > 0:
            self._predictions.keep(now, terms.lead_s, terms.projected_ready + decision.dispatch)
        return decision

    def _paced(self, now: float, room: int, interval: float, credit_dt: float, *,
               headroom: int, at_once: int = 0) -> Decision:  # fmt: skip
        return self._rate.paced(now, room, interval, credit_dt, headroom=headroom,
                                floor_s=self._settings.interval_min_s, at_once=at_once)  # fmt: skip

    def _rate_cap_per_s(self) -> float:
        # From the per-item synthesis duration, never from the completion rate: a cap from
        # completions tightens when dispatch slows, which slows dispatch further (collapse).
        syn = self._est.synthesis_s
        if not syn or syn <= 0:
            return math.inf
        return self._caps.synthesis_concurrency / syn

    # -- bootstrap and re-bootstrap -------------------------------------------------------

    def _cold_bootstrap(self, obs: Observation, room: int) -> Decision:
        self._terms = self._terms._replace(mode=Mode.BOOTSTRAP)
        count = self._starts.cold(obs, room, self.bootstrap_depth)
        if count > 0:
            self._rate.take(count)
            self._est.cold_dispatched(self._clock(), count)
        return Decision(count, None)

    @property
    def bootstrap_depth(self) -> int:
        """Partitions a cold start dispatches at once (``Bootstrap.depth``)."""
        return self._starts.depth(self._settings.bootstrap_depth)

    def lead_s(self) -> float:
        """T̂syn, the synthesis lead time (s) the projection looks ahead."""
        return self._est.lead_s(self._clock())

    def little_depth(self, gpu_workers: int) -> int:
        """Partitions in flight that keep ``gpu_workers`` busy with ``q*`` waiting:
        ceil(T̂syn ÷ base interval + q*)."""
        gpu = self._est.gpu_service_s
        if gpu is None:
            raise ValueError("little_depth needs a GPU service-time estimate")
        base = self._base(gpu, gpu_workers)
        return math.ceil(self.lead_s() / base + self._setpoint(base))

    @staticmethod
    def _base(gpu: float, workers: int) -> float:
        """The feed-forward interval T̂gpu ÷ W (s); infinite without a worker consuming."""
        return math.inf if workers <= 0 else max(gpu / workers, 1e-9)

    def _rebootstrap(self, obs: Observation, room: int) -> Decision:
        self._law.reset()  # bumpless restart: the old integral belongs to another regime
        self._predictions.forget()
        self._starts.restart(self.little_depth(self._workers), self.bootstrap_depth)
        return self._refill(obs, room)

    def _refill(self, obs: Observation, room: int) -> Decision:
        self._terms = self._compute(obs, self._workers)._replace(mode=Mode.BOOTSTRAP)
        floor = self._settings.interval_min_s
        return self._starts.refill(self._clock(), room, self._rate, floor)

    # -- the model, its correction and the output -----------------------------------------

    def _compute(self, obs: Observation | None, workers: int) -> Terms:
        s = self._settings
        gpu = self._est.gpu_service_s
        rate_cap = self._rate_cap_per_s()
        if gpu is None or not self._est.known or obs is None:
            mode = Mode.BOOTSTRAP if not self._est.known else Mode.DRAINED
            interval = 0.0
            if self._manual_interval_s is not None:
                mode, interval = Mode.MANUAL, self._manual_interval_s
            return Terms(mode, 0.0, s.target_ready, 0.0, 0.0, 0.0, 0.0, 1.0, interval, rate_cap,
                         self.lead_s(), workers)  # fmt: skip
        terms = self._output(obs, workers, self._terms.error)
        if self._manual_interval_s is not None:
            return terms._replace(mode=Mode.MANUAL, interval_s=self._manual_interval_s)
        return terms

    def _output(self, obs: Observation, workers: int, error: float) -> Terms:
        """Terms for prediction error ``error`` and the integral as it stands."""
        s = self._settings
        base, lead, setpoint = self._model(workers)
        p_term, i_term = self._law.terms(error)
        projected = obs.ready + obs.synthesizing - lead / base + p_term + i_term
        multiplier = self._law.multiplier(projected, setpoint)
        interval = min(base / multiplier, s.interval_max_s)
        mode = Mode.BOOTSTRAP if self._est.cold_cohort_open else Mode.PACING
        return Terms(mode, projected, setpoint, error, p_term, i_term,
                     min(base, s.interval_max_s), multiplier, interval,
                     self._rate_cap_per_s(), lead, workers)  # fmt: skip

    def _model(self, workers: int) -> tuple[float, float, float]:
        """(base interval, lead time, setpoint) for ``workers``: the base interval and the
        setpoint recomputed only when an estimate or the worker count changed; the lead time
        each time (the cold cohort's bound and the live floor move with the clock)."""
        key = (self._est.version, workers, id(self._settings))
        if key != self._model_key:
            gpu = self._est.gpu_service_s or 0.0
            base = self._base(gpu, workers)
            self._model_cache = (base, self._setpoint(base))
            self._model_key = key
        base, setpoint = self._model_cache
        return base, self.lead_s(), setpoint

    def _setpoint(self, base_interval_s: float) -> float:
        """The effective setpoint q* (partitions): the ready buffer of ``target_ready_s`` of
        GPU work (÷ the base interval), at least ``target_ready``, and more where the spread
        of synthesis and GPU times makes the ready queue wander further (``spread_sigmas``)."""
        s = self._settings
        rate = 1 / base_interval_s
        spread = self._est.ready_wander_sd(rate, self._est.synthesis_s or 0.0)
        buffer = s.target_ready_s * rate if math.isfinite(rate) else 0.0
        return max(s.target_ready, buffer, s.spread_sigmas * spread)

    def _pace(self, obs: Observation, dt: float, *, blocked: bool) -> Terms:
        """The PI step on the prediction error (``PILaw.step``), then the output."""
        now, workers, lead = self._clock(), self._workers, self.lead_s()
        idle = max(0, workers - obs.gpu_busy)
        error = self._predictions.error(now, lead, obs.ready, idle)
        before = self._output(obs, workers, error)
        dt_leads = dt / max(lead, 1e-9)
        self._law.step(error, dt_leads, before.multiplier, blocked=blocked or workers == 0)
        return self._output(obs, workers, error)

    # -- run-time changes -----------------------------------------------------------------

    def retune(self, **changes: Any) -> ControllerSettings:
        """Change gains, setpoint or limits without a jump in the correction.

        The integral is re-seeded so that the correction ``kp·ε + ki·∫ε`` keeps its value
        under the new gains (where ``ki > 0``); a new setpoint moves the output as a setpoint
        should. Unknown names, ``policy`` (fixed at start) or invalid values raise ValueError
        naming the field and the rule; nothing changes then.
        """
        unknown = sorted(set(changes) - set(ControllerSettings.model_fields))
        if unknown:
            raise ValueError(f"unknown controller setting(s): {', '.join(unknown)}")
        if "policy" in changes:
            raise ValueError(POLICY_FIXED)
        new = ControllerSettings.model_validate({**self._settings.model_dump(), **changes})
        self._settings = new
        keep = self._terms.mode is not Mode.DRAINED and self._est.known
        self._law.retune(new, self._terms.error, keep=keep)
        self._refresh_terms()
        return new

    def set_manual(self, interval_s: float | None) -> None:
        """Fix the dispatch interval (s), or hand control back to PI with None (bumpless:
        the integral is seeded so the PI output starts at the manual interval, as far as a
        correction of at most q* either way allows)."""
        if interval_s is not None:  # within interval_min_s and interval_max_s
            self._settings.check_manual_interval(interval_s)
        if interval_s is None and self._manual_interval_s is not None:
            # The correction under which the PI output gives the manual rate.
            t = self._terms
            model = t.projected_ready - t.p_term - t.i_term
            wanted = t.ff_interval_s / self._manual_interval_s
            self._law.seed(self._law.correction_for(wanted, t.setpoint, model), t.error)
        self._manual_interval_s = interval_s
        self._refresh_terms()

    def _refresh_terms(self) -> None:
        obs = self._last_obs
        if self._manual_interval_s is not None or (
            self._terms.mode is not Mode.DRAINED and self._est.known and obs is not None
        ):
            self._terms = self._compute(obs, self._workers)
