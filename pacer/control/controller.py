"""The dispatch controller: when to start the next synthesis.

Pure and synchronous: a function of observations and an injected clock, so the simulator and
the service drive the very same object. No asyncio, no metrics library.

Model (``pacer.control.model``): the *projected* ready depth ``q̂ = q + s − λ̂·T̂syn`` (ready,
plus in synthesis but for the hung, minus what the GPUs consume during one synthesis lead time,
``λ̂ = W ÷ T̂gpu``) predicts the ready depth one lead time ahead. A dispatch shows in ``q̂`` at
once; the ready depth sees it one synthesis later.

Law (``pacer.control.pi_law``): a Smith predictor. Each projection is kept and, one lead time
later, compared with the ready depth then observed; the mismatch ``ε``, filtered over a lead
time, corrects the projection: ``q̃ = q̂ + ε̄``. PI acts on ``e = q* − q̃`` and sets the dispatch
rate around the feed-forward: ``r = λ̂ + (kp·e + ki·∫e dt ÷ T̂syn) ÷ T̂syn``. kp is the share of
a shortfall refilled each lead time; ki the share of a persistent error removed each lead time.

Output: dispatch by rate within the caps (``pacer.control.rate_dispatch``; syntheses at once
include a small queue in front of the synthesis processes, sized from the spread of synthesis
times, so that the bottleneck never waits for a dispatch), under a safety ceiling: q̃, or
q̂ where lower, never beyond ``2·q* + 1`` (an order up to the setpoint as a bound, not the
law); the end of the backlog together where it fits under that ceiling. ``q*`` is the ready
buffer in seconds of GPU work, ``target_ready_s ÷ base``, at least ``target_ready``
partitions. The cold start and the refills after a drain: ``pacer.control.bootstrap``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from pacer.config import ControllerSettings
from pacer.control.bootstrap import Bootstrap
from pacer.control.estimates import Estimates, Estimator
from pacer.control.live_floor import older_than
from pacer.control.pacing import Pacing
from pacer.control.policy import Caps, Decision, Mode, Observation, SynthesisParts, Terms
from pacer.control.rate_dispatch import QUEUE_SIGMAS, RateDispatch
from pacer.control.worker_hold import WorkerHold

POLICY_FIXED = "policy is chosen at start (PACER_CONTROLLER__POLICY) and cannot be retuned"


class PIController:
    """PI pacing with feed-forward, a synthesis-throughput cap and (re-)bootstrap.

    ``HUNG_FACTOR``: a worker on one partition for longer than this many T̂gpu is not counted
    among the workers consuming (a hung worker, or a stalled GPU, consumes nothing).
    ``CEILING``: dispatch never takes q̃ (or q̂, where lower) past q* × (1 + ``CEILING``) + 1.
    ``queue_sigmas``: the queue in front of the synthesis processes covers this many standard
    deviations of their bunched ends (`pacer.control.rate_dispatch.executor_queue`); an
    instance given ``queue_sigmas=0`` keeps none (no more syntheses than processes).

    >>> from pacer.control.policy import Caps, Observation
    >>> c = PIController(ControllerSettings(), Caps(48, 50), clock=lambda: 0.0)
    >>> c.decide(Observation(ready=0, synthesizing=0, gpu_busy=0, gpu_workers=2, backlog=100))
    Decision(dispatch=45, next_at=None)
    """

    synthesis_workers: int | None = None  # its caps bound synthesis; no pool of its own
    HUNG_FACTOR = 10.0
    CEILING = 1.0

    def __init__(
        self,
        settings: ControllerSettings,
        caps: Caps,
        clock: Callable[[], float] = time.monotonic,
        estimates: Estimates | None = None,
        *,
        queue_sigmas: float = QUEUE_SIGMAS,
    ) -> None:
        self._settings = settings
        self._caps = caps
        self._clock = clock
        self._est = Estimator(
            settings.gpu_window, settings.synthesis_window, estimates or Estimates()
        )
        self._pacing = Pacing(settings, self._est, caps, queue_sigmas)
        self._rebased = 0  # the estimator's re-basings seen
        self._last_update: float | None = None
        self._rate = RateDispatch(caps)
        self._bunched = 0  # `ends_bunched` at the last decision
        self._workers = 1  # GPU workers delivering: live, and not stuck on one partition
        self._hold = WorkerHold()  # the pipeline of workers just lost, kept a while
        self._held = 0  # lost workers whose pipeline is kept now
        self._manual_interval_s: float | None = None
        self._starts = Bootstrap(caps, warm=estimates is not None and estimates.known)
        self._last_obs: Observation | None = None
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
        return self._pacing.law.integral

    @property
    def terms(self) -> Terms:
        return self._terms

    @property
    def settings(self) -> ControllerSettings:
        return self._settings

    def interval_s(self) -> float:
        return self._terms.interval_s

    @property
    def synthesis_supply_per_s(self) -> float:
        """Partitions a second the synthesis slots finish with every one busy, the wait for
        a process left out (`Model.slots_rate`); 0 until a synthesis time is known."""
        return self._pacing.model.slots_rate()

    @property
    def synthesis_handoff_s(self) -> float | None:
        """The hand-off to and from the synthesis threads as measured (s, `Handoff.trip_s`);
        None until measured (an engine over the protocol reports none)."""
        handoff = self._pacing.model.handoff
        return handoff.trip_s if handoff.known else None

    def observe_gpu_service(self, seconds: float) -> None:
        """One partition's GPU service time (s), start of H2D to end of its last kernel."""
        self._est.observe_gpu_service(seconds)

    def observe_synthesis(self, seconds: float, parts: SynthesisParts | None = None) -> None:
        """One partition's synthesis duration (s), dispatch to ready, and how it divides where
        measured (`pacer.control.handoff`). Raises ValueError for parts that do not fit."""
        if parts is not None:
            self._pacing.model.handoff.observe(seconds, parts)
        self._est.observe_synthesis(seconds, self._clock())

    def observe_synthesis_failure(self, elapsed_s: float) -> None:
        """A synthesis failed or timed out ``elapsed_s`` after its dispatch: it leaves the
        cold start's first cohort, and a long one counts toward T̂syn (``Estimator``)."""
        self._est.observe_synthesis_failure(elapsed_s, self._clock())

    def live_workers(self, obs: Observation) -> int:
        """GPU workers delivering: the live ones (``obs.gpu_workers``) less those on one
        partition for more than ``HUNG_FACTOR`` × T̂gpu (hung, or stalled with their GPU);
        ``obs.gpu_busy_ages_s`` is oldest first, so they are counted by bisection."""
        gpu = self._est.gpu_service_s
        if gpu is None or not obs.gpu_busy_ages_s:
            return max(0, obs.gpu_workers)
        return max(0, obs.gpu_workers - older_than(obs.gpu_busy_ages_s, self.HUNG_FACTOR * gpu))

    # -- the decision ------------------------------------------------------------------

    def decide(self, obs: Observation) -> Decision:
        """Partitions to dispatch now, and when to ask again at the latest."""
        now = self._clock()
        dt = self._take_in(obs, now)
        room = self._rate.room(obs, self._est.stuck)
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
        workers = max(1, obs.gpu_workers)
        gpu = self._est.gpu_service_s
        self._est.fit(workers, math.inf if not gpu else workers * self.lead_s() / gpu)
        self._est.observe_running(now, obs.synthesizing, obs.synthesis_ages_s)
        self._pacing.model.observe_synthesizing(now, obs.synthesizing)
        workers = self.live_workers(obs)
        hold_s = self._settings.lost_gpu_hold_leads * self.lead_s()
        self._held = self._hold.update(now, self._workers, workers, hold_s)
        if workers != self._workers:
            # Projections made for another number of consumers: the ready depth a lead later
            # tells of the change, not of the model (D190).
            self._pacing.predictions.forget()
        self._workers = workers
        self._rate.queue = self.synthesis_queue()
        self._bunched = self.ends_bunched()
        return dt

    def synthesis_queue(self) -> int:
        """Partitions allowed to wait in front of the synthesis processes
        (`Model.synthesis_queue`)."""
        return self._pacing.model.synthesis_queue()

    def ends_bunched(self) -> int:
        """How far the synthesis slots' ends may run ahead of their mean count over one
        synthesis (`Model.ends_bunched`)."""
        return self._pacing.model.ends_bunched()

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
            self._pacing.predictions.forget()  # nothing paced: no projection to hold to
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
            self._pacing.forget()

    def _pace_decision(
        self, obs: Observation, now: float, dt: float, room: int, credit_dt: float
    ) -> Decision:
        """The PI step, then the output: the rate, under the safety ceiling."""
        workers, lead = self._workers, self.lead_s()
        self._pacing.take_in(now, dt, lead, obs.ready, max(0, workers - obs.gpu_busy))
        before = self._output(obs, workers, lead)
        self._pacing.integrate(before, dt, blocked=room <= 0 or self._rate.tokens < 1)
        self._terms = terms = self._pacing.stepped(before)
        if self._est.cold_cohort_open:
            count = self._starts.hold_depth(obs, room, self._hold_depth(obs), self._rate)
            if count > 0:
                return Decision(count, now + terms.interval_s)
        lowest = terms.projected_ready - max(0.0, terms.mismatch)  # a mismatch above: stale
        headroom = math.ceil(terms.setpoint * (1 + self.CEILING) + 1 - lowest)
        # The end of the backlog goes out together: nothing after it to pace for.
        at_once = obs.backlog if obs.backlog <= headroom else 0
        if workers == 0:
            headroom = at_once = 0  # no GPU consumes: nothing to pace
        decision = self._paced(
            now, room, terms.interval_s, credit_dt, headroom=headroom, at_once=at_once
        )
        if workers > 0:
            self._pacing.keep(now, terms, decision.dispatch)
        return decision

    def _paced(self, now: float, room: int, interval: float, credit_dt: float, *,
               headroom: int, at_once: int = 0) -> Decision:  # fmt: skip
        return self._rate.paced(now, room, interval, credit_dt, headroom=headroom,
                                floor_s=self._settings.interval_min_s, at_once=at_once)  # fmt: skip

    def _rate_cap_per_s(self) -> float:
        # From the per-item synthesis duration, never from the completion rate: a cap from
        # completions tightens when dispatch slows, which slows dispatch further (collapse).
        # The processes' own time where measured, else T̂syn: the hand-off and the queue's
        # wait are no cores' work, and would hold the cap below what the processes finish
        # (D200). The ends that bunch up count: at the mean rate alone the bucket runs dry
        # where synthesis bounds, and slots freed together wait for tokens (D193).
        process_s = self._pacing.model.process_s()
        if process_s <= 0:
            return math.inf
        return (self._caps.synthesis_concurrency + self._bunched) / process_s

    # -- bootstrap and re-bootstrap -------------------------------------------------------

    def _cold_bootstrap(self, obs: Observation, room: int) -> Decision:
        self._terms = self._terms._replace(mode=Mode.BOOTSTRAP)
        count = self._starts.cold(obs, room, self.bootstrap_depth)
        if count > 0:
            self._rate.take(count)
            self._est.cold_dispatched(self._clock(), count)
        return Decision(count, None)

    def _hold_depth(self, obs: Observation) -> int:
        """The depth held while the cold start's cohort runs: the bootstrap depth, at most
        ``Bootstrap.HOLD_LITTLE`` × the Little's-law depth of the censored lead time (a heavy
        tail's stragglers hold no more), and what the GPUs take over ``Bootstrap.HOLD_LEADS`` ×
        the oldest member's age plus q* (the slots filled at first are not filled again)."""
        if self._est.gpu_service_s is None or self._workers <= 0:
            return self.bootstrap_depth
        little = math.ceil(Bootstrap.HOLD_LITTLE * self.little_depth(self._workers))
        if not obs.synthesis_ages_s:
            return min(self.bootstrap_depth, little)
        base, setpoint = self._pacing.model.at(self._workers)
        horizon = math.ceil(Bootstrap.HOLD_LEADS * obs.synthesis_ages_s[0] / base + setpoint)
        return min(self.bootstrap_depth, little, horizon)

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
        return self._pacing.model.little_depth(gpu_workers, self.lead_s())

    def _rebootstrap(self, obs: Observation, room: int) -> Decision:
        self._pacing.forget()  # a bumpless restart: the old integral is another regime's
        self._starts.restart(self.little_depth(self._workers), self.bootstrap_depth)
        return self._refill(obs, room)

    def _refill(self, obs: Observation, room: int) -> Decision:
        self._terms = self._compute(obs, self._workers)._replace(mode=Mode.BOOTSTRAP)
        floor = self._settings.interval_min_s
        return self._starts.refill(self._clock(), room, self._rate, floor)

    # -- the projection, its error and the rate --------------------------------------------

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
        terms = self._output(obs, workers, self.lead_s())
        if self._manual_interval_s is not None:
            return terms._replace(mode=Mode.MANUAL, interval_s=self._manual_interval_s)
        return terms

    def _output(self, obs: Observation, workers: int, lead_s: float) -> Terms:
        """The terms of ``obs`` (``Pacing.terms``), with the synthesis rate cap."""
        terms = self._pacing.terms(obs, workers=workers, lead_s=lead_s, hung=self._est.hung,
                                   held=self._held)  # fmt: skip
        return terms._replace(rate_cap_per_s=self._rate_cap_per_s())

    # -- run-time changes -----------------------------------------------------------------

    def retune(self, **changes: Any) -> ControllerSettings:
        """Change gains, setpoint or limits without a jump in the correction.

        The integral is re-seeded so that the correction ``kp·(q* − q̂) + ki·∫e`` keeps its value
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
        self._pacing.retune(new, self._terms, keep=keep)
        self._refresh_terms()
        return new

    def set_manual(self, interval_s: float | None) -> None:
        """Fix the dispatch interval (s), or hand control back to PI with None (bumpless:
        the integral is seeded so the PI output starts at the manual rate, within the
        integral's clamps). Raises ValueError for an interval outside the settings'
        interval_min_s and interval_max_s."""
        if interval_s is not None:  # within interval_min_s and interval_max_s
            self._settings.check_manual_interval(interval_s)
        if interval_s is None and self._manual_interval_s is not None:
            self._pacing.leave_manual(self._manual_interval_s, self._terms)
        if (interval_s is None) != (self._manual_interval_s is None):
            # The projections made before describe another dispatch: a ready depth after the
            # operator's rate would be held against them (D190).
            self._pacing.predictions.forget()
        self._manual_interval_s = interval_s
        self._refresh_terms()

    def _refresh_terms(self) -> None:
        obs = self._last_obs
        if self._manual_interval_s is not None or (
            self._terms.mode is not Mode.DRAINED and self._est.known and obs is not None
        ):
            self._terms = self._compute(obs, self._workers)
