"""The duration estimates under the disturbances a proving host sees, on a virtual clock."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from pacer.config import ControllerSettings
from pacer.control.cohort import ColdCohort
from pacer.control.controller import PIController
from pacer.control.estimates import Estimates, Estimator, estimates_key
from pacer.control.live_floor import older_than
from pacer.control.policy import AgesView, Caps, Mode, Observation
from pacer.control.windows import DurationWindow
from tests.conftest import FakeClock


def estimator(saved: Estimates | None = None, workers: int = 2) -> Estimator:
    est = Estimator(gpu_window=64, synthesis_window=64, saved=saved or Estimates())
    est.fit(workers, in_synthesis=0.0)
    return est


def jitter(value: float, spread: float = 0.05) -> itertools.cycle[float]:
    """A steady level with a little spread: value × (1 − spread, 1, 1 + spread), repeating."""
    return itertools.cycle((value * (1 - spread), value, value * (1 + spread)))


# -- GPU service time ---------------------------------------------------------------------


@pytest.mark.parametrize("workers", [2, 100], ids=["h200", "wide-host"])
def test_a_stall_of_every_worker_leaves_the_gpu_estimate_where_it_was(workers: int) -> None:
    est = estimator(workers=workers)
    level = jitter(0.16)
    for _ in range(8 * workers):
        est.observe_gpu_service(next(level))
    for _ in range(workers):  # a 30 s stall: one long partition on each worker
        est.observe_gpu_service(30.0)
    for _ in range(workers):
        est.observe_gpu_service(next(level))
    # An EMA at 0.05 reads 0.16 + 0.05 × 29.84 ≈ 1.65 s after one such sample, ~3 s after two.
    assert est.gpu_service_s == pytest.approx(0.16, rel=0.02)


@pytest.mark.parametrize("workers", [1, 2, 4], ids=["one", "h200", "two-gpus"])
def test_a_gpu_that_speeds_up_is_believed_after_a_run_of_shorter_samples(workers: int) -> None:
    est = estimator(workers=workers)
    slow, fast = jitter(0.32), jitter(0.16)
    for _ in range(64):
        est.observe_gpu_service(next(slow))
    run = max(3, workers + 1)  # Estimator.DROP_RUN_MIN, one a worker more
    for _ in range(run - 1):
        est.observe_gpu_service(next(fast))
    assert est.gpu_service_s == pytest.approx(0.32, rel=0.1)  # not yet: a run is not complete
    est.observe_gpu_service(next(fast))
    # At 2 workers and 0.16 s, 3 samples are ~0.3 s (an EMA at 0.05 needs ~60 to get within 5 %).
    assert est.gpu_service_s == pytest.approx(0.16, rel=0.05)
    assert est.shifts == (1, 0)


def test_short_gpu_times_that_are_no_run_are_no_change_of_level() -> None:
    est = estimator()
    level = jitter(0.32)
    for _ in range(64):
        est.observe_gpu_service(next(level))
    for _ in range(20):  # one short partition in every few: small ones among the usual
        est.observe_gpu_service(0.1)
        est.observe_gpu_service(next(level))
        est.observe_gpu_service(next(level))
    assert est.shifts == (0, 0)
    assert est.gpu_service_s == pytest.approx((0.1 + 2 * 0.32) / 3, rel=0.05)  # their mean


def test_a_gpu_that_slows_down_is_followed_too() -> None:
    est = estimator()
    for sample in itertools.islice(jitter(1.8), 64):
        est.observe_gpu_service(sample)
    for sample in itertools.islice(jitter(3.24), 8):
        est.observe_gpu_service(sample)
    assert est.gpu_service_s == pytest.approx(3.24, rel=0.05)


def test_partitions_of_two_sizes_in_turn_are_not_a_change_of_level() -> None:
    # Jobs of 10 partitions alternate between 1x (1.8 s) and 6x (10.8 s): the estimate is the
    # mixture's mean, not whichever size came last.
    est = estimator()
    for i in range(400):
        est.observe_gpu_service(1.8 if (i // 10) % 2 == 0 else 10.8)
        if i >= 64:
            assert 0.75 * 6.3 <= (est.gpu_service_s or 0.0) <= 1.25 * 6.3
    assert est.shifts == (0, 0)


def test_runs_of_two_sizes_of_uneven_length_widen_the_gpu_window() -> None:
    # Runs of 2 to 20 partitions of 1x (1.8 s) and 6x (10.8 s) in turn, the mixture's mean
    # 6.6 s: 64 samples hold a handful of runs and their mean swung from 4.4 s to 9 s with
    # the mix; the window grows until the mean is known within 5 %, as the controller fits
    # it before each decision.
    est = estimator()
    runs = itertools.cycle((3, 17, 9, 14, 5, 12, 20, 4, 11, 7, 16, 2))
    size, seen = 1.8, []
    for length in itertools.islice(runs, 120):
        size = 10.8 if size == 1.8 else 1.8
        for _ in range(length):
            est.fit(2, in_synthesis=0.0)
            est.observe_gpu_service(size)
            seen.append(est.gpu_service_s or 0.0)
    assert 0.9 * 6.6 <= min(seen[512:]) <= max(seen[512:]) <= 1.1 * 6.6
    assert est.shifts == (0, 0)


def test_one_size_keeps_the_gpu_window_it_was_given() -> None:
    # One size (σ ≈ 5 %) needs no more than the 64 samples: a GPU twice as fast is still
    # followed within a few samples after thousands at the old speed.
    est = estimator()
    slow, fast = jitter(0.32), jitter(0.16)
    for _ in range(2000):
        est.fit(2, in_synthesis=0.0)
        est.observe_gpu_service(next(slow))
    for _ in range(12):
        est.fit(2, in_synthesis=0.0)
        est.observe_gpu_service(next(fast))
    assert (est.gpu_service_s or 0.0) == pytest.approx(0.16, rel=0.05)


def test_runs_of_two_sizes_longer_than_half_a_window_are_taken_back_together() -> None:
    # Runs of 40: the first change looks like a new level; when the old level comes back
    # within a window, the samples set aside return and both levels count from then on.
    est = estimator()
    for i in range(400):
        est.observe_gpu_service(1.8 if (i // 40) % 2 == 0 else 10.8)
    assert est.shifts == (0, 0)  # each change was taken back
    assert 1.8 < (est.gpu_service_s or 0.0) < 10.8


# -- synthesis duration -------------------------------------------------------------------


def test_synthesis_that_slows_five_fold_is_followed_within_one_lead_time() -> None:
    """At t0 the cores slow 5x, work in progress too: a synthesis dispatched a seconds before
    t0 ends at t0 + 5 × (30 − a), so at t0 + x the ones completing took 30 + 0.8x and the
    oldest running is as old. The new lead time is 150 s."""
    est = estimator(Estimates(gpu_service_s=1.8, synthesis_s=30.0))
    for sample in itertools.islice(jitter(30.0, 0.1), 64):
        est.observe_synthesis(sample, now=0.0)
    est.observe_running(0.0, 33, (33.0, 32.0, 31.0))
    assert est.lead_s(0.0) == pytest.approx(30.0, rel=0.01)
    leads = {}
    for x in range(0, 151):
        if x % 4 == 0:  # completions slow to one every ~4.5 s
            est.observe_synthesis(30 + 0.8 * x, now=float(x))
        est.observe_running(float(x), 33, (30 + 0.8 * x, 30 + 0.8 * x - 0.2))
        leads[x] = est.lead_s(float(x))
    assert leads[150] >= 0.8 * 150
    assert leads[75] >= 0.8 * 75
    # An EMA at 0.02 of the same completions reads ~66 s at x = 150.


def steady(est: Estimator, until: float, step: float = 0.1) -> None:
    """A steady host up to ``until`` (s): syntheses of 1.3 to 1.5 s complete, and the
    syntheses running are up to 1.5 s old (the fourth oldest 1.45 s)."""
    durations = itertools.cycle((1.3, 1.35, 1.4, 1.45, 1.5))
    t = 0.0
    while t < until:
        est.observe_synthesis(next(durations), now=t)
        est.observe_running(t, 18, (1.5, 1.48, 1.46, 1.45, 1.2, 1.0, 0.8))
        t += step


def test_the_live_floor_keeps_a_margin_taken_before_the_change() -> None:
    """At t0 = 30 s the cores slow five-fold, work in progress too: at t0 + x the syntheses
    running are 0.8x older than they were, and those completing took as long. They enter the
    window at once, its longest and its spread with them; the floor's margin, from the ages
    seen before the change, is the 0.05 s by which the fourth oldest outran T̂syn."""
    est = estimator(Estimates(gpu_service_s=0.16, synthesis_s=1.4))
    steady(est, until=30.0)
    assert est.lead_s(30.0) == pytest.approx(1.4, rel=0.02)
    for i in range(1, 41):
        x = i * 0.1
        est.observe_synthesis(1.45 + 0.8 * x, now=30.0 + x)
        ages = tuple(1.5 + 0.8 * x - d for d in (0.0, 0.02, 0.04, 0.05, 0.3, 0.5))
        est.observe_running(30.0 + x, 18, ages)
        # The floor: the fourth oldest, 1.45 + 0.8x, less the margin 0.05 from before.
        assert est.lead_s(30.0 + x) >= 1.4 + 0.8 * x - 0.01, x


def test_hung_syntheses_neither_hold_the_lead_time_up_nor_count_in_synthesis() -> None:
    est = estimator(Estimates(gpu_service_s=0.16, synthesis_s=1.4))
    steady(est, until=30.0)
    for i in range(1, 301):  # three syntheses hang at t = 30 s; the rest go on as before
        t = 30.0 + i * 0.1
        hung = (t - 30.0 + 1.0, t - 30.0 + 0.9, t - 30.0 + 0.8)
        est.observe_synthesis(1.4, now=t)
        est.observe_running(t, 18, (*hung, 1.5, 1.48, 1.46, 1.45, 1.2))
        assert est.lead_s(t) < 1.5, t  # the fourth oldest not hung is as old as ever
    assert est.hung == 3  # past 10 × T̂syn: they will not deliver, and the count leaves them
    est.observe_synthesis_failure(600.0, now=60.0)  # one times out: a hang, not a sample
    assert est.synthesis_s == pytest.approx(1.4, rel=0.01)


WIDE_GAP_S = 1 / 86  # a wide host dispatches a synthesis this often ...
WIDE_DURATIONS = (1.3, 1.35, 1.4, 1.45, 1.5)  # ... each of these in turn (s): 120 run


def wide(est: Estimator, start: float, until: float, hung: int = 0) -> None:
    """A wide host from ``start`` to ``until`` (s), in steps of 0.1 s: the syntheses
    dispatched every ``WIDE_GAP_S`` since t = -2 s run ``WIDE_DURATIONS`` in turn, those that
    end within a step complete in it, and the 64 oldest of those running are listed; the
    ``hung`` dispatched last at 1 s before ``start`` never end."""
    first = math.ceil(-2.0 / WIDE_GAP_S)
    stuck = set(range(math.floor((start - 1.0) / WIDE_GAP_S), -1, -1)[:hung])
    t = start
    while t < until:
        t += 0.1
        numbers = range(first, math.floor(t / WIDE_GAP_S) + 1)
        ends = {i: i * WIDE_GAP_S + WIDE_DURATIONS[i % 5] for i in numbers}
        for i, end in ends.items():
            if t - 0.1 < end <= t and i not in stuck:
                est.observe_synthesis(end - i * WIDE_GAP_S, now=t)
        running = [i for i, end in ends.items() if end > t or i in stuck]
        ages = tuple(t - i * WIDE_GAP_S for i in running[: Observation.SYNTHESIS_AGES])
        est.observe_running(t, len(running), ages)  # oldest first
        assert est.lead_s(t) < 1.6, t


def test_hangs_up_to_a_tenth_of_those_running_leave_the_lead_time_alone() -> None:
    """Six of 120 syntheses hang: more than the fourth oldest, and told as hung only at
    10 × T̂syn. Until then the floor follows the twelfth oldest, which is not hung."""
    est = estimator(Estimates(gpu_service_s=0.16, synthesis_s=1.4))
    wide(est, 0.0, 30.0)
    wide(est, 30.0, 60.0, hung=6)  # the lead time stays below 1.6 s throughout
    assert est.hung == 6


def test_a_slowdown_raises_the_floor_on_a_wide_host() -> None:
    """Every one of 120 syntheses slows five-fold at 30 s: the whole tail ages, the twelfth
    oldest with it, and the floor follows."""
    est = estimator(Estimates(gpu_service_s=0.16, synthesis_s=1.4))
    wide(est, 0.0, 30.0)
    for i in range(1, 41):
        x = i * 0.1
        est.observe_running(30.0 + x, 120, tuple(1.5 + 0.8 * x - 0.01 * k for k in range(64)))
        assert est.lead_s(30.0 + x) >= 1.4 + 0.8 * x - 0.2, x


def lognormal(median: float, sigma: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.lognormvariate(math.log(median), sigma) for _ in range(n)]


def test_a_heavy_tail_stays_in_the_synthesis_estimate() -> None:
    # Lognormal sigma 1: the mean is 1.65 × the median, a good part of it in samples beyond
    # 8 × the median, which are real syntheses, not hung ones.
    est = estimator(Estimates(gpu_service_s=0.16, synthesis_s=2.3))
    seen = []
    for i, sample in enumerate(lognormal(1.4, 1.0, 12000, seed=1)):
        est.observe_synthesis(sample, now=i * 0.08)
        est.fit(2, in_synthesis=30.0)
        if i >= 2000:
            seen.append(est.synthesis_s or 0.0)
    # On average over the run, T̂syn is the mean: trimmed, it would run low.
    assert statistics.fmean(seen) == pytest.approx(1.4 * math.exp(0.5), rel=0.03)


def test_a_heavy_tail_still_shows_a_change_of_level() -> None:
    est = estimator(Estimates(gpu_service_s=0.16, synthesis_s=2.3))
    for i, sample in enumerate(lognormal(1.4, 1.0, 3000, seed=2)):
        est.observe_synthesis(sample, now=i * 0.08)
        est.fit(2, in_synthesis=30.0)
    before = est.synthesis_s
    for i, sample in enumerate(lognormal(7.0, 1.0, 600, seed=3)):  # five-fold slower
        est.observe_synthesis(sample, now=240.0 + i * 0.08)
    assert est.shifts[1] >= 1
    assert (est.synthesis_s or 0.0) >= 3 * (before or math.inf)


def test_two_sizes_drawn_at_random_are_no_change_of_level() -> None:
    # 1× or 3× the work, even odds, on a 30 s host: a run of small ones now and then must not
    # read as a level of its own (the lead time would halve, and the GPUs starve).
    rng = random.Random(5)
    est = estimator(Estimates(gpu_service_s=6.0, synthesis_s=60.0))
    for i in range(3000):
        est.observe_synthesis(rng.lognormvariate(math.log(30.0), 0.2) * rng.choice((1, 3)), i)
        est.fit(4, in_synthesis=40.0)
    assert est.shifts[1] == 0


def mixed_then_short(est: Estimator, running: tuple[float, ...]) -> None:
    """A window of partitions of 1× and 6× the work (20 s and 120 s), all but one in twenty of
    them large (the small ones of the mix finished early), then a run of 40 small ones
    completing while ``running`` (ages at t = 200 s, oldest first) run."""
    rng = random.Random(6)
    for i in range(200):
        work = 20.0 if i % 20 == 0 else 120.0
        est.observe_synthesis(work * rng.uniform(0.95, 1.05), i)
        est.fit(4, in_synthesis=40.0)
    for i in range(40):
        t = 200.0 + 0.5 * i
        est.observe_running(t, len(running), tuple(a + 0.5 * i for a in running))
        est.observe_synthesis(20.0 * rng.uniform(0.95, 1.05), t)


def test_a_run_of_small_partitions_while_large_ones_run_is_no_faster_host() -> None:
    # The small ones of a mix finish first: a run of them reads as a faster level, and T̂syn
    # would fall to the small ones' 20 s while 30 large ones, far older, still run.
    est = estimator(Estimates(gpu_service_s=3.0, synthesis_s=95.0))
    mixed_then_short(est, (*(110.0 - 2.4 * k for k in range(30)), 15.0, 10.0, 5.0))
    assert est.shifts[1] == 0
    assert (est.synthesis_s or 0.0) > 60.0


def test_a_faster_host_is_believed_where_the_syntheses_running_agree() -> None:
    # The same completions, and every synthesis running younger than the new level's longest.
    est = estimator(Estimates(gpu_service_s=3.0, synthesis_s=95.0))
    mixed_then_short(est, tuple(19.0 - 0.5 * k for k in range(33)))
    assert est.shifts[1] == 1
    assert est.synthesis_s == pytest.approx(20.0, rel=0.05)


def burst_after_a_pause(est: Estimator, large_share: float) -> None:
    """A window of mostly large partitions (120 s; the completions that follow a pause in
    dispatch are the large ones still running), then a burst of 40 dispatched over 2 s at
    t = 200 s, ``large_share`` of them large and the rest small (20 s), each completion told
    with the ages of the syntheses still running, as the service tells them."""
    rng = random.Random(7)
    for i in range(200):
        work = 20.0 if i % 20 == 0 else 120.0
        est.observe_synthesis(work * rng.uniform(0.95, 1.05), i)
        est.fit(4, in_synthesis=40.0)
    starts = [200.0 + 0.05 * k for k in range(40)]
    ends = sorted(
        (start + (120.0 if rng.random() < large_share else 20.0) * rng.uniform(0.95, 1.05), start)
        for start in starts
    )
    for n, (end, start) in enumerate(ends):
        running = [s for e, s in ends[n:] if s <= end]
        est.observe_running(
            end, len(running), tuple(sorted((end - s for s in running), reverse=True))
        )
        est.observe_synthesis(end - start, end)
        if end > 260.0:
            return


def test_the_small_ones_of_a_burst_are_no_faster_host_while_its_large_ones_run() -> None:
    # After a pause, a burst: its small partitions finish first, and their run lies below
    # a window that holds mostly large ones. Its large ones, sent with them, still run at
    # the small ones' age, younger than the old bar (the new level's longest by 20 %).
    est = estimator(Estimates(gpu_service_s=3.0, synthesis_s=95.0))
    burst_after_a_pause(est, large_share=0.4)
    assert est.shifts[1] == 0
    assert (est.synthesis_s or 0.0) > 60.0


def test_a_burst_all_of_one_faster_size_is_a_faster_host() -> None:
    # The same burst, all of it small: nothing sent with the run is left running, so the
    # faster level is believed.
    est = estimator(Estimates(gpu_service_s=3.0, synthesis_s=95.0))
    burst_after_a_pause(est, large_share=0.0)
    assert est.shifts[1] == 1
    assert est.synthesis_s == pytest.approx(20.0, rel=0.05)


def test_the_synthesis_window_grows_with_its_spread() -> None:
    # Partitions of 1× or 4× the work, 3 to 1, drawn at random: the mean is 2.45 s. A window
    # of 64 would swing with its mix by a third either way.
    rng = random.Random(4)
    est = estimator(Estimates(gpu_service_s=0.3, synthesis_s=2.45))
    seen = []
    for i in range(6000):
        est.observe_synthesis(1.4 * rng.choice((1.0, 1.0, 1.0, 4.0)), now=i * 0.1)
        est.fit(2, in_synthesis=20.0)
        if i >= 3000:
            seen.append(est.synthesis_s or 0.0)
    assert 0.85 * 2.45 <= min(seen) <= max(seen) <= 1.15 * 2.45, (min(seen), max(seen))


def test_the_live_floor_stays_below_the_estimate_and_ignores_a_straggler() -> None:
    est = estimator(Estimates(gpu_service_s=1.8, synthesis_s=30.0))
    samples = [24 + 12 * i / 63 for i in range(64)]  # 24 to 36 s, mean 30
    for sample in samples:
        est.observe_synthesis(sample, now=0.0)
    est.observe_running(100.0, 33, (36.0, 35.9, 35.8))  # as old as the longest seen
    assert est.live_floor_s() < 30.0
    est.observe_running(101.0, 33, (500.0, 35.9, 35.8))  # one straggler, or one hung
    assert est.synthesis_s == pytest.approx(30.0)
    assert est.live_floor_s() < 30.0
    assert est.lead_s(100.0) == est.synthesis_s


def test_a_timed_out_synthesis_counts_as_at_least_its_age() -> None:
    est = estimator(Estimates(gpu_service_s=1.0, synthesis_s=10.0))
    for _ in range(32):
        est.observe_synthesis(10.0, now=0.0)
    est.observe_synthesis_failure(0.5, now=1.0)  # failed quickly: says nothing of durations
    assert est.synthesis_s == pytest.approx(10.0)
    for _ in range(16):  # all time out at 40 s: synthesis takes at least that long now
        est.observe_synthesis_failure(40.0, now=2.0)
    assert est.synthesis_s == pytest.approx(40.0)
    assert est.failures == 17


# -- the cold start's first cohort --------------------------------------------------------


def cold(clock: FakeClock, depth: int = 4) -> PIController:
    c = PIController(ControllerSettings(bootstrap_depth=depth, spread_sigmas=0.0),
                     Caps(48, 200), clock)  # fmt: skip
    c.decide(Observation(ready=0, synthesizing=0, gpu_busy=0, gpu_workers=2, backlog=1000))
    return c


def test_a_failed_synthesis_closes_the_cold_start_cohort(clock: FakeClock) -> None:
    c = cold(clock)  # 4 dispatched at t = 0
    clock.now = 10.0
    c.observe_synthesis_failure(10.0)  # one of them fails, and is retried later
    for duration in (29.0, 30.0, 31.0):
        clock.now = duration
        c.observe_synthesis(duration)
    c.observe_gpu_service(2.0)
    o = Observation(ready=3, synthesizing=1, gpu_busy=0, gpu_workers=2, backlog=1000)
    c.decide(o)  # the cohort is in: topped up to the Little's-law depth at once ...
    c.decide(o)  # ... and pacing from there on
    assert c.terms.mode is Mode.PACING
    assert c.lead_s() == pytest.approx(30.0)
    clock.now = 1000.0  # the lead time no longer grows with the clock
    assert c.lead_s() == pytest.approx(30.0)


def test_a_lost_synthesis_leaves_the_cohort_once_nothing_that_old_runs(clock: FakeClock) -> None:
    c = cold(clock)
    for duration in (29.0, 30.0, 31.0):
        clock.now = duration
        c.observe_synthesis(duration)
    c.observe_gpu_service(2.0)
    clock.now = 40.0
    # The fourth never reports (a pipeline that loses it): the oldest synthesis running was
    # dispatched 5 s ago, so no cohort member (dispatched at 0) is still running.
    o = Observation(ready=3, synthesizing=4, gpu_busy=0, gpu_workers=2, backlog=1000,
                    synthesis_ages_s=(5.0, 5.0, 4.0, 4.0))  # fmt: skip
    c.decide(o)
    c.decide(o)
    assert c.terms.mode is Mode.PACING
    clock.now = 1000.0
    assert c.lead_s() == pytest.approx(30.0)


def test_cohort_members_fail_or_are_forgotten_by_dispatch_time() -> None:
    cohort = ColdCohort()
    cohort.dispatched(0.0, 2)
    cohort.dispatched(5.0, 2)
    assert cohort.failed(now=8.0, seconds=3.0) is None  # dispatched at 5: a member, 3 left
    assert cohort.lower_bound(10.0) == pytest.approx((10 + 10 + 5) / 3)
    assert cohort.completed(now=30.0, seconds=30.0) is None
    assert cohort.forget_before(1.0) is None  # the other one of t = 0 is gone; t = 5 runs
    assert cohort.completed(now=35.0, seconds=30.0) == pytest.approx(30.0)


# -- saved estimates ----------------------------------------------------------------------


def test_saved_estimates_count_as_a_few_samples() -> None:
    est = estimator(Estimates(gpu_service_s=0.2, synthesis_s=1.4, synthesis_sd_s=0.2))
    assert est.gpu_service_s == pytest.approx(0.2)
    assert est.synthesis_sd_s == pytest.approx(0.2)
    for _ in range(4):  # within a factor of two: kept, as four samples among the fresh ones
        est.observe_gpu_service(0.16)
    assert 0.16 < (est.gpu_service_s or 0.0) < 0.2
    for _ in range(64):
        est.observe_gpu_service(0.16)
    assert est.gpu_service_s == pytest.approx(0.16)


@pytest.mark.parametrize(
    ("saved", "fresh"), [(0.5, 0.16), (0.05, 0.16)], ids=["saved-slower", "saved-faster"]
)
def test_saved_estimates_that_the_first_sample_contradicts_are_dropped(
    saved: float, fresh: float
) -> None:
    est = estimator(Estimates(gpu_service_s=saved, synthesis_s=0.6))
    est.observe_gpu_service(fresh)
    est.observe_synthesis(1.4, now=1.4)
    assert (est.gpu_service_s, est.synthesis_s) == (fresh, 1.4)


def test_saved_estimates_are_dropped_when_the_first_few_disagree() -> None:
    window = DurationWindow(size=64, recent=16, prior=10.0)
    for sample in (15.0, 25.0, 26.0):  # the first agrees within 2x, their median does not
        window.add(sample)
    assert window.value == pytest.approx(22.0)


def test_estimates_key_names_workload_parameters_gpu_and_cores() -> None:
    base = {"workload": "ntt", "params": {"field": "goldilocks", "log_n": 27},
            "gpu_model": "NVIDIA H200", "cores": 32}  # fmt: skip
    key = estimates_key(**base)  # type: ignore[arg-type]
    assert estimates_key(**base) == key  # type: ignore[arg-type]
    for change in ({"workload": "noop"}, {"params": {"field": "babybear", "log_n": 27}},
                   {"gpu_model": "NVIDIA H100"}, {"cores": 64}):  # fmt: skip
        assert estimates_key(**{**base, **change}) != key  # type: ignore[arg-type]


# -- the controller on these estimates ----------------------------------------------------


def test_dispatch_by_rate_goes_beyond_a_thousand_a_second(clock: FakeClock) -> None:
    """100 workers at 80 ms consume 1,250 partitions a second; woken every millisecond (or
    every 10 ms), the controller keeps up: no ceiling of one a call."""
    for wake_s in (0.001, 0.01):
        c = PIController(ControllerSettings(), Caps(768, 1024), clock, Estimates(0.08, 0.4))
        in_synthesis, sent = 500.0, 0
        for _ in range(round(1.0 / wake_s)):
            clock.advance(wake_s)
            in_synthesis -= 1250 * wake_s  # the GPUs take from a ready queue kept full
            d = c.decide(Observation(ready=8, synthesizing=round(in_synthesis), gpu_busy=100,
                                     gpu_workers=100, backlog=100_000))  # fmt: skip
            in_synthesis += d.dispatch
            sent += d.dispatch
        assert sent >= 1200, wake_s


def test_max_concurrent_unset_means_what_the_cores_allow() -> None:
    wide = Caps.from_host(cores=768, threads_per_synthesis=1, max_concurrent=None,
                          budget_bytes=2**40, partition_bytes=2**28)  # fmt: skip
    assert wide.synthesis_concurrency == 768
    capped = Caps.from_host(cores=768, threads_per_synthesis=1, max_concurrent=256,
                            budget_bytes=2**40, partition_bytes=2**28)  # fmt: skip
    assert capped.synthesis_concurrency == 256


def test_dead_and_hung_workers_leave_the_count(clock: FakeClock) -> None:
    c = PIController(ControllerSettings(), Caps(48, 200), clock, Estimates(2.0, 30.0))
    c.decide(Observation(ready=8, synthesizing=30, gpu_busy=2, gpu_workers=2, backlog=100))
    assert (c.terms.gpu_workers, c.terms.ff_interval_s) == (2, 1.0)
    # One worker's partition has run 25 s, more than 10 × T̂gpu: it consumes nothing. The
    # ages come oldest first, and the stuck are counted by bisection.
    c.decide(Observation(ready=8, synthesizing=30, gpu_busy=2, gpu_workers=2, backlog=100,
                         gpu_busy_ages_s=(25.0, 1.0)))  # fmt: skip
    assert (c.terms.gpu_workers, c.terms.ff_interval_s) == (1, 2.0)
    # The pipeline counts only live workers: one died.
    c.decide(Observation(ready=8, synthesizing=30, gpu_busy=1, gpu_workers=1, backlog=100))
    assert c.terms.gpu_workers == 1
    assert c.terms.projected_ready == pytest.approx(8 + 30 - 30.0 / 2.0)
    # Every worker stuck (a stall of the GPU): nothing is consumed, nothing dispatched.
    clock.advance(5.0)
    d = c.decide(Observation(ready=0, synthesizing=0, gpu_busy=2, gpu_workers=2, backlog=100,
                             gpu_busy_ages_s=(25.0, 25.0)))  # fmt: skip
    assert (c.terms.gpu_workers, d.dispatch) == (0, 0)
    assert math.isfinite(c.terms.ff_interval_s)


@pytest.mark.parametrize("seconds", [0.1, 1.1, 7.3, 29.9], ids=["0.1", "1.1", "7.3", "29.9"])
def test_equal_samples_spread_by_nothing_not_by_a_rounding_error_below_zero(
    seconds: float,
) -> None:
    # The square root of the ready queue's wander takes this spread: below 0, it raised.
    for n in range(2, 40):
        window = DurationWindow(64, 16)
        for _ in range(n):
            window.add(seconds)
        assert 0.0 <= window.half_mean_difference < 1e-12 * seconds


def test_ages_read_from_their_starts_count_as_the_ages_themselves() -> None:
    # Stuck workers are counted by bisection of their start times; the count must be the one
    # the ages give, at every limit, ties included.
    rng = random.Random(8)
    starts = sorted(round(rng.uniform(0.0, 100.0), 1) for _ in range(500))
    view = AgesView(starts, now=100.0)
    ages = tuple(view[i] for i in range(len(view)))
    for limit in [0.0, 0.05, 10.0, 33.3, 50.0, 99.9, 100.0, 150.0]:
        assert older_than(view, limit) == older_than(ages, limit), limit
