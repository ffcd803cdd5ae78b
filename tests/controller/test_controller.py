from __future__ import annotations

import math
from typing import Any

import pytest

from pacer.config import ControllerSettings
from pacer.control.cohort import ColdCohort
from pacer.control.controller import PIController
from pacer.control.estimates import Estimates
from pacer.control.policy import Caps, Mode, Observation
from tests.conftest import FakeClock

WARM = Estimates(gpu_service_s=2.0, synthesis_s=30.0)  # 2 workers: base interval 1 s, λT = 30
ROOMY = Caps(synthesis_concurrency=48, inflight_partitions=200)
# Slots to spare for GPUs four times faster than the saved 2 s (4 a second): 480 of 30 s.
SPARE = Caps(synthesis_concurrency=480, inflight_partitions=800)


def make(
    clock: FakeClock,
    estimates: Estimates | None = WARM,
    caps: Caps = ROOMY,
    **settings: Any,
) -> PIController:
    return PIController(ControllerSettings(**settings), caps, clock, estimates)


def obs(
    ready: int = 0, synth: int = 0, busy: int = 2, backlog: int = 1000, **kw: Any
) -> Observation:
    return Observation(ready=ready, synthesizing=synth, gpu_busy=busy, gpu_workers=2,
                       backlog=backlog, **kw)  # fmt: skip


def pace(
    c: PIController, clock: FakeClock, o: Observation, seconds: float, step: float = 0.1
) -> int:
    """Call decide every ``step`` seconds for ``seconds``; return partitions dispatched."""
    sent = 0
    for _ in range(round(seconds / step)):
        clock.advance(step)
        sent += c.decide(o).dispatch
    return sent


# -- bootstrap ---------------------------------------------------------------------------


def test_cold_start_fills_to_bootstrap_depth(clock: FakeClock) -> None:
    c = make(clock, estimates=None, bootstrap_depth=16)
    d = c.decide(obs(busy=0))
    assert (d.dispatch, c.terms.mode, c.bootstraps) == (16, Mode.BOOTSTRAP, 1)
    assert c.decide(obs(synth=16, busy=0)).dispatch == 0
    assert c.decide(obs(synth=10, busy=0)).dispatch == 6
    assert c.bootstraps == 1


@pytest.mark.parametrize(
    ("caps", "depth"),
    [(Caps(48, 50), 45), (Caps(160, 160), 144), (Caps(6, 50), 6), (Caps(1, 1), 1)],
    ids=["memory-bound", "large-host", "few-cores", "tiny"],
)
def test_automatic_bootstrap_depth_fills_every_synthesis_slot_within_most_of_memory(
    clock: FakeClock, caps: Caps, depth: int
) -> None:
    c = make(clock, estimates=None, caps=caps)
    assert c.bootstrap_depth == depth
    assert c.decide(obs(busy=0)).dispatch == depth


def test_cold_start_respects_caps_and_backlog(clock: FakeClock) -> None:
    c = make(clock, estimates=None, caps=Caps(synthesis_concurrency=4, inflight_partitions=50),
             bootstrap_depth=16)  # fmt: skip
    assert c.decide(obs(busy=0)).dispatch == 4
    c = make(clock, estimates=None)
    assert c.decide(obs(busy=0, backlog=3)).dispatch == 3


def test_cold_start_without_demand_dispatches_nothing(clock: FakeClock) -> None:
    c = make(clock, estimates=None)
    assert c.decide(obs(busy=0, backlog=0)).dispatch == 0
    assert c.bootstraps == 0


def test_cold_start_tops_up_to_littles_law_depth_once_rates_are_known(clock: FakeClock) -> None:
    c = make(clock, estimates=None, bootstrap_depth=10, spread_sigmas=0.0)
    c.decide(obs(busy=0))  # 10 dispatched at t=0
    clock.advance(30)
    for _ in range(10):
        c.observe_synthesis(30.0)  # the whole cohort is in: T̂syn = 30 s
    c.observe_gpu_service(2.0)  # 2 workers: base interval 1 s
    d = c.decide(obs(ready=8, synth=0, busy=2))
    # Little's-law depth ceil(30 ÷ 1 + 8) = 38, less the 10 in flight.
    assert d.dispatch == 28
    assert (c.bootstraps, c.rebootstraps) == (1, 0)


def test_cold_start_holds_bootstrap_depth_while_the_cohort_runs(clock: FakeClock) -> None:
    c = make(clock, estimates=None, bootstrap_depth=20, spread_sigmas=0.0)
    c.decide(obs(busy=0))
    clock.advance(10)
    c.observe_synthesis(10.0)  # one fast finisher: 19 still running
    c.observe_gpu_service(20.0)  # slow GPUs: the projection alone would stop dispatch
    c.decide(obs(ready=0, synth=19, busy=1))
    clock.advance(1)
    # The GPUs took 5 more; the cohort is still out, so in flight is topped back up to 20.
    d = c.decide(obs(ready=0, synth=14, busy=1))
    assert d.dispatch == 5
    assert c.terms.mode is Mode.BOOTSTRAP


def test_the_cold_hold_is_bounded_by_what_the_gpus_take(clock: FakeClock) -> None:
    # Synthesis far outruns the GPUs: 40 slots, GPUs that take one partition every 2 s.
    c = make(clock, estimates=None, bootstrap_depth=40, spread_sigmas=0.0)
    assert c.decide(obs(busy=0)).dispatch == 40  # nothing known yet: every slot
    clock.advance(10)
    c.observe_synthesis(10.0)  # the first finisher; 39 still running, 10 s old
    c.observe_gpu_service(4.0)  # 2 workers: 0.5 a second
    c.decide(obs(ready=0, synth=39, busy=1, synthesis_ages_s=(10.0,)))
    clock.advance(1)
    # The GPUs took 5 more. Over 1.25 × the oldest age (11 s) they take 6.9, and q* is 8:
    # the 35 in flight are more than that, and none of the 5 is sent again.
    assert c.decide(obs(ready=0, synth=34, busy=1, synthesis_ages_s=(11.0,))).dispatch == 0
    assert c.terms.mode is Mode.BOOTSTRAP


def test_the_cold_hold_is_at_most_twice_the_littles_law_depth(clock: FakeClock) -> None:
    # A heavy tail: 116 of a cohort of 120 took 2 s; 4 stragglers run on. Their age says the
    # lead time might be 20 s, but the censored mean says 2.6 s: the hold keeps no more than
    # twice the Little's-law depth that gives (D219).
    c = make(clock, estimates=None, caps=SPARE, bootstrap_depth=120, spread_sigmas=0.0)
    assert c.decide(obs(busy=0)).dispatch == 120
    clock.advance(2)
    for _ in range(116):
        c.observe_synthesis(2.0)
    c.observe_gpu_service(0.2)  # 2 workers: 10 partitions a second
    clock.advance(18)
    lead = (116 * 2.0 + 4 * 20.0) / 120
    assert c.lead_s() == pytest.approx(lead)
    # Rates known: the pipeline is topped up to the Little's-law depth first.
    little = c.decide(obs(ready=10, synth=4, busy=2, synthesis_ages_s=(20.0,) * 4)).dispatch + 16
    assert little == math.ceil(lead / 0.1 + c.terms.setpoint)
    clock.advance(0.1)
    held = c.decide(obs(ready=10, synth=little - 12, busy=2, synthesis_ages_s=(20.1,) * 4))
    # Where the oldest age bounded it alone, it held all 120 (86 more sent).
    assert held.dispatch == 2 * math.ceil(c.lead_s() / 0.1 + c.terms.setpoint) - little
    assert c.terms.mode is Mode.BOOTSTRAP


def test_cohort_bound_corrects_fast_first_finishers(clock: FakeClock) -> None:
    c = make(clock, estimates=None, bootstrap_depth=16)
    c.decide(obs(busy=0))  # 16 dispatched at t=0
    clock.advance(20)
    c.observe_synthesis(20.0)
    clock.advance(5)
    # 1 finished after 20 s; 15 still running, each 25 s old.
    assert c.lead_s() == pytest.approx((20 + 15 * 25) / 16)
    for duration in range(26, 41):
        clock.now = duration
        c.observe_synthesis(float(duration))
    assert c.estimates.synthesis_s == pytest.approx((20 + sum(range(26, 41))) / 16)
    assert c.lead_s() == c.estimates.synthesis_s


def test_cohort_ignores_later_partitions_that_overtake_it() -> None:
    cohort = ColdCohort()
    cohort.dispatched(0.0, 2)
    cohort.dispatched(10.0, 2)
    assert cohort.lower_bound(12.0) == pytest.approx((12 + 12 + 2 + 2) / 4)
    assert cohort.completed(now=11.0, seconds=11.0) is None  # dispatched at 0: a member
    assert cohort.lower_bound(12.0) == pytest.approx((11 + 12 + 2 + 2) / 4)
    assert cohort.completed(now=12.0, seconds=1.0) is None  # dispatched at 11: not a member
    assert cohort.lower_bound(12.0) == pytest.approx((11 + 12 + 2 + 2) / 4)
    assert cohort.completed(now=13.0, seconds=13.0) is None
    assert cohort.completed(now=14.0, seconds=4.0) is None
    assert cohort.completed(now=15.0, seconds=5.0) == pytest.approx((11 + 13 + 4 + 5) / 4)


def test_estimates_start_from_the_first_samples(clock: FakeClock) -> None:
    c = make(clock, estimates=None)
    for sample in (1.0, 2.0, 3.0):
        c.observe_gpu_service(sample)
    assert c.estimates.gpu_service_s == pytest.approx(2.0)  # not dominated by the first


def test_spread_of_synthesis_times_raises_the_setpoint(clock: FakeClock) -> None:
    c = make(clock, estimates=Estimates(gpu_service_s=0.5, synthesis_s=45.0), caps=SPARE,
             target_ready=8.0, spread_sigmas=3.0)  # fmt: skip
    for i in range(64):
        c.observe_synthesis(25.0 + 40.0 * (i * 37 % 64) / 63)  # even over 25-65 s: mean 45
    c.decide(obs(ready=8, synth=180, busy=2))
    # 4 partitions/s: the number in synthesis wanders by sqrt(4 × ∫F(1 − F)), and ∫F(1 − F)
    # of n samples evenly over w seconds is w(n + 1) ÷ 6(n − 1).
    half_mean_difference = 40.0 * 65 / (6 * 63)
    assert c.terms.setpoint == pytest.approx(3 * (4 * half_mean_difference) ** 0.5)
    narrow = make(clock, estimates=WARM, target_ready=8.0)
    narrow.decide(obs(ready=8, synth=30))
    assert narrow.terms.setpoint == 8.0


# -- the law: P on the projection, I on the Smith-predicted depth, around the feed-forward --


def test_at_setpoint_the_rate_is_the_feed_forward(clock: FakeClock) -> None:
    c = make(clock)
    c.decide(obs(ready=8, synth=30))  # q̂ = 8 + 30 − 30 = 8 = q*
    t = c.terms
    assert (t.mode, t.projected_ready, t.error, t.p_term, t.i_term) == (
        Mode.PACING,
        8.0,
        0.0,
        0.0,
        0.0,
    )
    assert (t.ff_interval_s, t.interval_s, t.multiplier) == pytest.approx((1.0, 1.0, 1.0))


@pytest.mark.parametrize("kp", [0.5, 1.0, 4.0])
def test_kp_is_the_share_of_a_shortfall_refilled_each_lead_time(
    clock: FakeClock, kp: float
) -> None:
    c = make(clock, kp=kp, ki=0.0)
    c.decide(obs(ready=0, synth=30))  # q̂ = 0: 8 short
    # 1 a second consumed, and kp × 8 more over the 30 s lead time.
    assert c.terms.p_term == pytest.approx(kp * 8)
    assert c.terms.interval_s == pytest.approx(1 / (1 + kp * 8 / 30))


def refill(kp: float, seconds: float) -> list[int]:
    """q̂ = −10 (18 short of q* = 8) at t = 0 in a pipeline whose GPUs take 1 a second:
    what each decision dispatches, every 0.1 s for ``seconds``."""
    clock = FakeClock()
    c = make(clock, kp=kp, ki=0.0)
    inventory, sent = 20.0, []  # ready + in synthesis; q̂ = inventory − 30
    for _ in range(round(seconds / 0.1)):
        dispatched = c.decide(obs(ready=0, synth=round(inventory))).dispatch
        sent.append(dispatched)
        inventory += dispatched - 0.1
        clock.advance(0.1)
    return sent


def test_a_shortfall_is_refilled_at_the_pace_kp_sets_not_at_once() -> None:
    # An order-up-to rule would send all 18 at the first decision. The law closes the gap
    # as e^(−kp·t ÷ T̂syn), above the 1 a second the GPUs take.
    for kp in (0.5, 2.0, 8.0):
        sent = refill(kp, 7.5)
        assert sent[0] <= 2, (kp, sent[:3])
        expected = 7.5 + 18 * (1 - math.exp(-kp * 7.5 / 30))
        assert sum(sent) == pytest.approx(expected, abs=2.5), kp
    assert sum(refill(0.5, 7.5)) < sum(refill(2.0, 7.5)) < sum(refill(8.0, 7.5))


def test_above_the_setpoint_dispatch_slows_below_the_feed_forward(clock: FakeClock) -> None:
    # q̂ = 10, 2 above q*: not a skip, as an order-up-to rule would, but the feed-forward
    # less kp × 2 over the lead time.
    c = make(clock, kp=4.0, ki=0.0)
    sent = pace(c, clock, obs(ready=10, synth=30), 30.0)
    assert sent == pytest.approx(30 * (1 - 4 * 2 / 30), abs=1)


def test_the_safety_ceiling_holds_dispatch_at_twice_the_setpoint(clock: FakeClock) -> None:
    # q̂ = 17 = 2 × q* + 1: nothing goes out, whatever the gains ask.
    c = make(clock, kp=0.0, ki=0.0)
    assert pace(c, clock, obs(ready=17, synth=30), 10) == 0
    assert pace(c, clock, obs(ready=15, synth=30), 10) > 0


def test_dispatches_are_spaced_by_the_interval(clock: FakeClock) -> None:
    c = make(clock, ki=0.0)
    o = obs(ready=8, synth=30)
    first = c.decide(o)
    assert first.dispatch == 1
    assert first.next_at == pytest.approx(clock.now + 1.0)
    clock.advance(0.5)
    assert c.decide(o).dispatch == 0
    clock.advance(0.5)
    assert c.decide(o).dispatch == 1


@pytest.mark.parametrize(("backlog", "sent"), [(2, 2), (11, 11), (12, 1)])
def test_the_end_of_the_backlog_goes_out_together(
    clock: FakeClock, backlog: int, sent: int
) -> None:
    c = make(clock)
    # q̂ = 8 + 28 − 30 = 6: room for 11 below the ceiling 2 × q* + 1. A backlog that fits
    # goes at once; a longer one is paced (one partition of credit now).
    assert c.decide(obs(ready=8, synth=28, backlog=backlog)).dispatch == sent


def _predicted(c: PIController, clock: FakeClock, ready: int = 17) -> None:
    """One lead time (30 s) and a second at q̂ = ``ready`` ≥ the ceiling 2 × q* + 1: no
    dispatch, so each projection kept is ``ready`` and the mismatch is 0 throughout."""
    pace(c, clock, obs(ready=ready, synth=30), 31.0, step=1.0)
    assert c.terms.mismatch == 0.0


def test_the_mismatch_is_against_the_projection_one_lead_time_ago(clock: FakeClock) -> None:
    c = make(clock, kp=1.0, ki=0.0)
    c.decide(obs(ready=17, synth=30))  # no projection is a lead time old yet
    assert c.terms.mismatch == 0.0
    _predicted(c, clock)
    clock.advance(1.0)
    c.decide(obs(ready=13, synth=30))  # 4 fewer ready than projected 30 s ago
    # ε = −4, filtered over a lead time: 1 s of it is 1 − e^(−1/30) of the way.
    mismatch = -4 * (1 - math.exp(-1 / 30))
    t = c.terms
    assert t.mismatch == pytest.approx(mismatch)
    assert t.projected_ready == pytest.approx(13 + mismatch)  # q̃ = q̂ + ε̄
    assert t.error == pytest.approx(8 - 13 - mismatch)  # what the integral takes in
    assert t.p_term == pytest.approx(1.0 * (8 - 13))  # P: the projection's own error


def test_a_ready_queue_above_its_projection_does_not_hold_dispatch_at_the_ceiling(
    clock: FakeClock,
) -> None:
    # Projected and observed at 17 for a lead time, then 40 ready with none in synthesis:
    # q̂ = 40 − 30 = 10, under the ceiling 2 × q* + 1 = 17, while the mismatch (40 against
    # the 17 projected) lifts q̃ past it within 15 s. The ceiling counts a mismatch only where
    # it lowers the projection: one above it is stale for a queue whose mix moved (D220).
    c = make(clock, kp=0.0, ki=0.0)
    _predicted(c, clock)
    sent = pace(c, clock, obs(ready=40, synth=0), 30.0)
    assert c.terms.projected_ready > 17
    assert sent >= 25  # the feed-forward, one a second


def test_an_empty_queue_with_an_idle_gpu_reads_as_too_optimistic(clock: FakeClock) -> None:
    # Synthesis full: nothing goes out, so q̂ = 0 + 30 − 30 = 0 is predicted and observed.
    c = make(clock, caps=Caps(synthesis_concurrency=30, inflight_partitions=200), ki=0.0)
    _predicted(c, clock, ready=0)
    clock.advance(1.0)
    c.decide(obs(ready=0, synth=30, busy=1))  # as predicted, but a worker idles on it
    assert c.terms.mismatch == pytest.approx(-1 * (1 - math.exp(-1 / 30)))


def test_the_ready_buffer_in_seconds_scales_with_the_gpu_rate(clock: FakeClock) -> None:
    slow = make(clock, target_ready=2.0, target_ready_s=10.0)  # 1 s a partition: 10
    fast = make(clock, estimates=Estimates(gpu_service_s=0.5, synthesis_s=30.0), caps=SPARE,
                target_ready=2.0, target_ready_s=10.0)  # 0.25 s: 40  # fmt: skip
    for c in (slow, fast):
        c.decide(obs(ready=8, synth=30))
    assert (slow.terms.setpoint, fast.terms.setpoint) == pytest.approx((10.0, 40.0))
    floor = make(clock, target_ready=8.0, target_ready_s=1.0)  # 1 partition: the floor holds
    floor.decide(obs(ready=8, synth=30))
    assert floor.terms.setpoint == 8.0


@pytest.mark.parametrize(
    ("ready", "settings", "interval"),
    [
        (-30, {"multiplier_max": 4.0}, 1 / 4),  # 38 short: the rate clamped high
        (-30, {"multiplier_max": 4.0, "interval_min_s": 0.5}, 1 / 4),  # a wake-up floor only
        (20, {"multiplier_min": 0.25}, 4.0),  # 12 over: the rate clamped low
        (20, {"interval_max_s": 2.0}, 2.0),  # interval clamped high
    ],
    ids=["multiplier-max", "interval-min", "multiplier-min", "interval-max"],
)
def test_output_clamps(
    clock: FakeClock, ready: int, settings: dict[str, Any], interval: float
) -> None:
    c = make(clock, **settings)
    c.decide(obs(ready=max(ready, 0), synth=30 + min(ready, 0)))
    assert c.terms.interval_s == pytest.approx(interval)


def test_a_change_of_model_forgets_the_predictions_and_the_integral(clock: FakeClock) -> None:
    c = make(clock, caps=SPARE, kp=0.0, ki=0.2)
    _predicted(c, clock)
    pace(c, clock, obs(ready=13, synth=30), 3.0, step=1.0)  # ε = 13 − 17 = −4
    assert c.integral != 0.0
    assert c.terms.mismatch < 0.0
    c.observe_gpu_service(0.5)  # a quarter of the saved 2 s: the saved estimates are dropped
    clock.advance(1.0)
    c.decide(obs(ready=13, synth=30))
    # The errors were the saved estimates' bias, which the fresh ones have removed: the
    # integral starts again from this second alone (q̂ = 13 + 30 − 30 ÷ 0.25 = −77).
    assert c.terms.mismatch == 0.0
    assert c.integral == pytest.approx((8 + 77) * 1.0 / 30)


def test_integral_accumulates_in_lead_times_and_stays_clamped(clock: FakeClock) -> None:
    c = make(clock, kp=0.0, ki=0.001, integral_min=-1.0)
    c.decide(obs(ready=17, synth=30))
    # q̂ = 17: e = 8 − 17 = −9 (the ceiling holds dispatch: no saturation of the law).
    pace(c, clock, obs(ready=17, synth=30), 3.0, step=1.0)
    assert c.integral == pytest.approx(-9 * 3 / 30)  # in lead times of 30 s
    pace(c, clock, obs(ready=17, synth=30), 20.0, step=1.0)
    assert c.integral == -1.0


def test_no_integration_while_saturated_in_the_error_direction(clock: FakeClock) -> None:
    c = make(clock, kp=10.0, ki=0.01, multiplier_max=2.0, multiplier_min=0.5)
    pace(c, clock, obs(ready=0, synth=30), 10.0)  # e = 8 > 0: the rate at its maximum
    assert c.integral == 0.0
    pace(c, clock, obs(ready=16, synth=30), 10.0)  # e = −8 < 0: the rate at its minimum
    assert c.integral == 0.0


def test_no_integration_while_no_gpu_worker_consumes(clock: FakeClock) -> None:
    """Both workers on one partition for more than HUNG_FACTOR × T̂gpu (a stalled GPU): none
    is live. The ready queue stands far above the setpoint, but the integral holds, however
    long the stall and however far apart the decisions."""
    c = make(clock, kp=1.0, ki=0.25)
    c.decide(obs(ready=8, synth=30))
    before = c.integral
    stalled = obs(ready=30, synth=0, gpu_busy_ages_s=(60.0, 60.0))
    assert c.live_workers(stalled) == 0
    pace(c, clock, stalled, 30.0, step=10.0)
    assert c.integral == before


def test_projections_made_for_other_workers_are_not_held_against_the_model(
    clock: FakeClock,
) -> None:
    """Every GPU lost for ten lead times, then back: the ready queue stood still meanwhile,
    which says nothing of the model. When the GPUs return, the projection carries no
    mismatch from the outage, and dispatch resumes before the ready queue runs down."""
    c = make(clock)
    pace(c, clock, obs(ready=8, synth=30), 90.0)  # steady: a projection at the setpoint
    lost = Observation(ready=38, synthesizing=0, gpu_busy=0, gpu_workers=0, backlog=1000)
    pace(c, clock, lost, 300.0, step=1.0)
    back = obs(ready=38, synth=0, busy=2)
    c.decide(back)
    assert abs(c.terms.mismatch) < 1.0
    assert pace(c, clock, back, 5.0) > 0


def _one_of_two_lost(clock: FakeClock, **settings: Any) -> tuple[PIController, Observation]:
    """A controller steady with two GPU workers (ready at the setpoint), and the observation
    once one of them has stopped delivering."""
    c = make(clock, **settings)
    pace(c, clock, obs(ready=8, synth=30), 90.0)
    return c, Observation(ready=8, synthesizing=30, gpu_busy=1, gpu_workers=1, backlog=1000)


def test_a_lost_workers_pipeline_is_kept_for_the_hold_then_given_back(clock: FakeClock) -> None:
    """One of two workers lost: for lost_gpu_hold_leads lead times (2 × 30 s) the setpoint
    keeps its share of the pipeline (Little's depth of 2 workers less that of 1: 15), so
    dispatch goes on at the live worker's rate; then the setpoint is the live worker's."""
    c, one = _one_of_two_lost(clock, lost_gpu_hold_leads=2.0)
    steady = c.terms.setpoint
    sent = pace(c, clock, one, 20.0)
    assert c.terms.setpoint == pytest.approx(steady + 15.0)
    assert c.terms.held == 1  # pacer_controller_held_workers
    assert 5 <= sent <= 15  # about the live worker's 0.5 a second
    pace(c, clock, one, 45.0)
    assert c.terms.setpoint == pytest.approx(steady)
    assert c.terms.held == 0


def test_by_default_the_hold_outlasts_an_outage_of_fifty_lead_times(clock: FakeClock) -> None:
    """The default hold, 100 lead times (100 × 30 s): a worker away for fifty lead times still
    has its share kept; one away for longer than a hundred has given it back."""
    c, one = _one_of_two_lost(clock)
    steady = c.terms.setpoint
    pace(c, clock, one, 1500.0, step=5.0)
    assert c.terms.setpoint == pytest.approx(steady + 15.0)
    pace(c, clock, one, 1550.0, step=5.0)
    assert c.terms.setpoint == pytest.approx(steady)


def test_with_no_hold_a_lost_workers_pipeline_shrinks_at_once(clock: FakeClock) -> None:
    c, one = _one_of_two_lost(clock, lost_gpu_hold_leads=0.0)
    assert pace(c, clock, one, 20.0) == 0  # 15 partitions too many for one worker
    assert c.terms.setpoint == pytest.approx(8.0)


def test_a_worker_back_within_the_hold_ends_it(clock: FakeClock) -> None:
    c, one = _one_of_two_lost(clock)
    steady = c.terms.setpoint
    pace(c, clock, one, 10.0)
    assert c.terms.held == 1
    pace(c, clock, obs(ready=8, synth=30), 1.0)
    assert c.terms.setpoint == pytest.approx(steady)
    assert c.terms.held == 0


def test_projections_made_before_a_manual_rate_are_not_held_against_the_model(
    clock: FakeClock,
) -> None:
    """Ten lead times at a manual rate raise the ready queue; back under PI, the ready depth
    is not compared with a projection made before the operator took over."""
    c = make(clock)
    pace(c, clock, obs(ready=8, synth=30), 90.0)
    before = c.terms.mismatch
    c.set_manual(0.5)
    pace(c, clock, obs(ready=30, synth=30), 300.0, step=1.0)
    c.set_manual(None)
    pace(c, clock, obs(ready=30, synth=30), 10.0, step=1.0)
    assert abs(c.terms.mismatch - before) < 1.0


@pytest.mark.parametrize(
    ("o", "caps"),
    [
        (obs(ready=0, synth=30), Caps(synthesis_concurrency=30, inflight_partitions=200)),
        (obs(ready=0, synth=30, budget_free=0), ROOMY),
    ],
    ids=["synthesis-concurrency", "memory-budget-bytes"],
)
def test_no_integration_while_a_cap_blocks_dispatch(
    clock: FakeClock, o: Observation, caps: Caps
) -> None:
    c = make(clock, caps=caps, kp=0.1)
    pace(c, clock, o, 60.0)  # e > 0, but a cap is full
    assert c.integral == 0.0


def test_a_rate_the_byte_budget_holds_back_is_not_saved_up_for_a_burst(
    clock: FakeClock,
) -> None:
    # One a second by hand; the budget admits none for 30 s, then room for 20. Credit for
    # what could not start is not banked: one goes out, then one a second again.
    c = make(clock)
    c.set_manual(1.0)
    full, free = obs(ready=8, synth=30, budget_free=0), obs(ready=8, synth=30, budget_free=20)
    assert pace(c, clock, full, 30.0) == 0
    clock.advance(0.1)
    assert c.decide(free).dispatch == 1
    assert pace(c, clock, free, 10.0) == 10


def test_a_refill_counts_only_what_the_byte_budget_lets_start(clock: FakeClock) -> None:
    # The warm start's refill of 38: the budget lets 5 start now, the rest as bytes free.
    c = make(clock)
    assert c.decide(obs(busy=0, budget_free=5)).dispatch == 5
    assert c.decide(obs(synth=5, busy=0, budget_free=0)).dispatch == 0
    assert c.decide(obs(synth=5, busy=0, budget_free=33)).dispatch == 33
    assert (c.rebootstraps, c.terms.mode) == (1, Mode.BOOTSTRAP)


def test_no_integration_without_demand(clock: FakeClock) -> None:
    c = make(clock)
    c.decide(obs(ready=0, synth=30, backlog=0))
    pace(c, clock, obs(ready=0, synth=0, busy=0, backlog=0), 600.0, step=10.0)
    assert c.integral == 0.0
    assert c.terms.mode is Mode.DRAINED


def test_the_terms_show_the_hung_syntheses_and_the_lead_time_they_leave_alone(
    clock: FakeClock,
) -> None:
    # 30 s syntheses, none past 32 s; four dispatched together have run for 100 s, the rest
    # no more than 28 s: a gap that tells the four as hung, well before 10 × T̂syn.
    c = make(clock)
    for i in range(32):
        c.observe_synthesis(28.0 + 4.0 * (i * 13 % 32) / 31)
    ages = (100.0, 99.9, 99.8, 99.7, *(28.0 - 0.9 * i for i in range(26)))
    c.decide(obs(ready=8, synth=30, synthesis_ages_s=ages))
    assert c.terms.hung == 4  # left out of those in synthesis (pacer_controller_synthesis_hung)
    assert c.terms.lead_s == pytest.approx(30.0, rel=0.05)  # not lifted by their age


# -- retune and manual --------------------------------------------------------------------


def _settled(clock: FakeClock) -> PIController:
    c = make(clock, kp=0.5, ki=0.2)
    _predicted(c, clock)
    pace(c, clock, obs(ready=6, synth=30), 10.0)  # ε = 6 − 17: the integral winds
    assert c.integral != 0.0
    return c


@pytest.mark.parametrize(
    "changes",
    [{"kp": 1.5}, {"ki": 0.05}, {"target_ready": 12.0}, {"kp": 0.1, "target_ready": 5.0}],
    ids=["kp", "ki", "setpoint", "kp-and-setpoint"],
)
def test_retune_is_bumpless(clock: FakeClock, changes: dict[str, float]) -> None:
    """The correction kp·(q* − q̂) + ki·∫e keeps its value; so does the output, unless the
    setpoint moved (then the output follows the new setpoint, as it should)."""
    c = _settled(clock)
    correction, interval = c.terms.p_term + c.terms.i_term, c.terms.interval_s
    c.retune(**changes)
    c.decide(obs(ready=6, synth=30))  # same observation, same instant
    if "target_ready" not in changes:
        assert c.terms.p_term + c.terms.i_term == pytest.approx(correction)
        assert c.terms.interval_s == pytest.approx(interval)
    for key, value in changes.items():
        assert getattr(c.settings, key) == value


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"kp": -1.0}, "kp"),
        ({"interval_min_s": 100.0}, "interval_min_s (100.0) must be less than interval_max_s"),
        ({"gain": 1.0}, "unknown controller setting(s): gain"),
    ],
    ids=["negative-kp", "limits-order", "unknown"],
)
def test_retune_rejects_bad_values_and_changes_nothing(
    clock: FakeClock, changes: dict[str, float], message: str
) -> None:
    c = _settled(clock)
    settings, integral = c.settings, c.integral
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        c.retune(**changes)
    assert (c.settings, c.integral) == (settings, integral)


def test_manual_interval_and_bumpless_return(clock: FakeClock) -> None:
    c = _settled(clock)
    c.set_manual(2.0)
    c.decide(obs(ready=6, synth=30))
    assert (c.terms.mode, c.terms.interval_s) == (Mode.MANUAL, 2.0)
    c.set_manual(None)
    assert c.terms.mode is Mode.PACING
    assert c.terms.interval_s == pytest.approx(2.0)
    rule = r"manual_interval_s must be from interval_min_s \(0.001 s\) to interval_max_s \(60 s\)"
    for wrong in (0.0, 1e300, 61.0, math.inf, math.nan):
        with pytest.raises(ValueError, match=rule):
            c.set_manual(wrong)
    assert c.terms.mode is Mode.PACING  # none taken


# -- caps ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("o", "caps"),
    [
        (obs(synth=10), Caps(synthesis_concurrency=10, inflight_partitions=200)),
        (obs(ready=5, synth=10, busy=5), Caps(synthesis_concurrency=48, inflight_partitions=20)),
        (obs(synth=10, pool_free=0), Caps(synthesis_concurrency=48, inflight_partitions=200)),
        (obs(synth=10, budget_free=0), Caps(synthesis_concurrency=48, inflight_partitions=200)),
    ],
    ids=["synthesis-concurrency", "memory-budget", "pinned-pool", "memory-budget-bytes"],
)
def test_caps_block_dispatch(clock: FakeClock, o: Observation, caps: Caps) -> None:
    c = make(clock, caps=caps)
    assert pace(c, clock, o, 30.0) == 0


def test_caps_from_host() -> None:
    caps = Caps.from_host(cores=192, threads_per_synthesis=4, max_concurrent=256,
                          budget_bytes=700 * 2**30, partition_bytes=14 * 2**30)  # fmt: skip
    assert caps == Caps(synthesis_concurrency=48, inflight_partitions=50)
    with pytest.raises(ValueError, match="inflight_partitions must be at least 1, got 0"):
        Caps(synthesis_concurrency=1, inflight_partitions=0)


def test_rate_cap_comes_from_synthesis_duration(clock: FakeClock) -> None:
    c = make(clock, caps=Caps(synthesis_concurrency=12, inflight_partitions=200))
    c.decide(obs(ready=0, synth=0))
    # With the ends that bunch up: one for the hand-off alone, as the saved times do not spread.
    assert c.ends_bunched() == 1
    assert c.terms.rate_cap_per_s == pytest.approx((12 + 1) / 30.0)


def test_rate_cap_limits_a_burst_to_the_synthesis_rate(clock: FakeClock) -> None:
    # Few syntheses of 60 s: synthesis absorbs 4 ÷ 60 partitions/s, far below the GPU rate.
    est = Estimates(gpu_service_s=0.2, synthesis_s=60.0)
    c = make(clock, estimates=est, caps=Caps(synthesis_concurrency=4, inflight_partitions=500))
    sent = pace(c, clock, obs(ready=0, synth=0), 600.0)
    assert sent <= 4 + 600 * (4 + c.ends_bunched()) / 60.0 + 1


def test_cap_never_ratchets_down_at_a_low_dispatch_rate(clock: FakeClock) -> None:
    """The collapse loop: a cap from the completion rate tightens as dispatch slows. Ours is
    from the per-item duration, so a slow start leaves it where it was."""
    c = make(clock, caps=Caps(synthesis_concurrency=8, inflight_partitions=200))
    c.set_manual(30.0)  # one dispatch every 30 s: one completion every 30 s
    caps_seen = []
    for _ in range(40):
        pace(c, clock, obs(ready=0, synth=1), 30.0, step=1.0)
        c.observe_synthesis(30.0)
        caps_seen.append(c.terms.rate_cap_per_s)
    completion_rate = 1 / 30.0
    assert min(caps_seen) == pytest.approx((8 + c.ends_bunched()) / 30.0)
    assert min(caps_seen) > 7 * completion_rate
    c.set_manual(None)
    # Back on PI with a starved pipeline, dispatch reaches the cap's rate, far above the
    # completion rate seen so far (which would have allowed 2 in this minute).
    assert pace(c, clock, obs(ready=0, synth=1), 60.0) >= 60 * (8 + c.ends_bunched()) / 30.0


# -- re-bootstrap --------------------------------------------------------------------------


def test_rebootstrap_refills_to_littles_law_depth_on_a_true_drain(clock: FakeClock) -> None:
    c = make(clock, ki=0.02)
    pace(c, clock, obs(ready=6, synth=30), 30.0)
    pace(c, clock, obs(ready=0, synth=0, busy=0, backlog=0), 60.0)  # drained, idle
    d = c.decide(obs(ready=0, synth=0, busy=0, backlog=500))  # a job arrives
    assert d.dispatch == math.ceil(30 / 1.0) + 8
    assert (c.rebootstraps, c.integral, c.terms.mode) == (1, 0.0, Mode.BOOTSTRAP)
    assert c.estimates == WARM


def test_rebootstrap_refill_continues_as_caps_allow(clock: FakeClock) -> None:
    c = make(clock, caps=Caps(synthesis_concurrency=10, inflight_partitions=200))
    assert c.decide(obs(ready=0, synth=0, busy=0)).dispatch == 10
    assert c.decide(obs(ready=0, synth=10, busy=0)).dispatch == 0
    clock.advance(30)
    assert c.decide(obs(ready=0, synth=0, busy=0)).dispatch == 10
    assert c.rebootstraps == 1


def test_no_rebootstrap_on_a_momentary_empty_pipeline(clock: FakeClock) -> None:
    c = make(clock)
    _predicted(c, clock)
    pace(c, clock, obs(ready=13, synth=30), 10.0)  # e < 0: the integral winds down
    clock.advance(0.1)
    integral = c.integral
    first = c.decide(obs(ready=0, synth=0, busy=0))  # empty for a moment, work waiting
    clock.advance(0.2)  # shorter than rebootstrap_hold_s
    c.decide(obs(ready=0, synth=first.dispatch, busy=0))
    # Not a re-bootstrap (the integral is kept, and the shortfall is paced, not refilled).
    assert (c.rebootstraps, c.terms.mode) == (0, Mode.PACING)
    assert c.integral != 0.0
    assert integral < 0


def test_no_second_rebootstrap_before_the_refill_reaches_a_gpu(clock: FakeClock) -> None:
    c = make(clock)
    c.decide(obs(ready=0, synth=0, busy=0))
    assert c.rebootstraps == 1
    pace(c, clock, obs(ready=0, synth=0, busy=0, backlog=0), 10.0)  # refill was cancelled
    c.decide(obs(ready=0, synth=0, busy=0))
    assert c.rebootstraps == 1
    c.decide(obs(ready=0, synth=5, busy=1))  # work reached a GPU: armed again
    pace(c, clock, obs(ready=0, synth=0, busy=0, backlog=0), 10.0)
    c.decide(obs(ready=0, synth=0, busy=0))
    assert c.rebootstraps == 2


def test_warm_start_refills_without_a_cold_bootstrap(clock: FakeClock) -> None:
    c = make(clock, caps=Caps(synthesis_concurrency=40, inflight_partitions=40))
    assert c.bootstrap_depth == 36
    assert c.decide(obs(busy=0)).dispatch == 38  # Little's-law depth ceil(30 ÷ 1 + 8)
    assert (c.bootstraps, c.rebootstraps) == (0, 1)


def test_warm_start_refills_at_least_a_cold_bootstraps_depth(clock: FakeClock) -> None:
    # Saved estimates are a few samples: a warm start trusts them no more than a cold start
    # trusts nothing, and dispatches at least the cold bootstrap depth.
    c = make(clock, estimates=Estimates(gpu_service_s=2.0, synthesis_s=3.0))
    assert c.decide(obs(busy=0)).dispatch == c.bootstrap_depth == 48
    # Later refills (a true drain) use the estimates alone.
    pace(c, clock, obs(ready=0, synth=0, busy=0, backlog=0), 5.0)
    c.decide(obs(ready=0, synth=1, busy=1))  # work reached a GPU: re-armed
    pace(c, clock, obs(ready=0, synth=0, busy=0, backlog=0), 5.0)
    assert c.decide(obs(ready=0, synth=0, busy=0)).dispatch == math.ceil(3.0 / 1.0 + 8)


def test_observation_rejects_a_bad_duration(clock: FakeClock) -> None:
    c = make(clock)
    with pytest.raises(ValueError, match="a duration must be a finite number of seconds >= 0"):
        c.observe_gpu_service(-1.0)
    with pytest.raises(ValueError, match="got nan"):
        c.observe_synthesis(float("nan"))
