"""Duration estimates the controller paces by, from windows of recent samples.

GPU service time and synthesis duration are each estimated from a window of their last
samples (``pacer.control.windows.DurationWindow``): one GPU stall moves the estimate not at
all, and a real change of level is followed within a few samples. The synthesis duration keeps
every sample, a heavy tail included, and its spread, because the spread of synthesis times sets
how far the ready queue wanders. The syntheses still running give a live floor and tell the
hung ones (``pacer.control.live_floor.LiveFloor``): those older than anything the host shows
before a change mark a slowdown before any slow one completes; those that fail to finish
when the window says they should size it sooner (``pacer.control.survival.SurvivalCheck``). A
cold start adds a censored estimate of its first cohort (``pacer.control.cohort.ColdCohort``).

Saved estimates (``Estimates``) count as a few samples, not as settled, and are dropped when
the first fresh samples disagree with them by more than a factor of two; the service keeps
them under ``estimates_key``, so a host that changed workload, size, GPU or cores starts cold
instead of from someone else's numbers.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from pacer.control.cohort import ColdCohort
from pacer.control.live_floor import LiveFloor, older_than
from pacer.control.policy import Observation
from pacer.control.survival import SurvivalCheck
from pacer.control.windows import MAX_WINDOW, DurationWindow, check_duration

__all__ = ["ColdCohort", "DurationWindow", "Estimates", "Estimator", "estimates_key"]


@dataclass(frozen=True)
class Estimates:
    """Durations (s); None until the first sample. Saved so a restart starts warm."""

    gpu_service_s: float | None = None
    synthesis_s: float | None = None
    synthesis_sd_s: float = 0.0  # standard deviation of one synthesis duration

    @property
    def known(self) -> bool:
        return self.gpu_service_s is not None and self.synthesis_s is not None


def estimates_key(
    *,
    workload: str,
    params: Mapping[str, object],
    gpu_model: str,
    cores: int,
) -> str:
    """What saved estimates are valid for: the workload, its parameters (field, partition
    size, kernel, workers per GPU, ...), the GPU model and the cores synthesis runs on.

    Estimates saved under another key describe another host or workload and are not used.

    >>> estimates_key(workload="ntt", params={"log_n": 27, "field": "goldilocks"},
    ...               gpu_model="NVIDIA H200", cores=32)
    '{"cores": 32, "gpu_model": "NVIDIA H200", "params": {"field": "goldilocks", "log_n": 27}, "workload": "ntt"}'
    """  # noqa: E501
    return json.dumps(
        {"workload": workload, "params": dict(params), "gpu_model": gpu_model, "cores": cores},
        sort_keys=True,
        default=str,
    )


class Estimator:
    """Keeps the estimates up to date from observed durations.

    T̂gpu is the mean of the last ``gpu_window`` GPU service times (at least 8 per worker, and
    more where they spread widely: enough to know the mean within ``MEAN_ERROR``), less
    the W longest and W shortest: a stall that holds every worker adds one long sample
    each, and those are the ones left out. T̂syn is the mean of the last ``synthesis_window``
    synthesis durations, every one of them (a heavy tail is real), with their spread; its
    window holds at least two lead times of them, and as many as its spread needs for the
    mean within ``MEAN_ERROR``. Both drop older samples on a change of level
    (``DurationWindow``); a GPU that speeds up is believed after a run of W + 1 shorter times
    (at least ``DROP_RUN_MIN``). The lead time the projection looks ahead is T̂syn, raised by
    the cold start's censored cohort mean, by the live floor and by a slowdown seen in the
    syntheses that do not finish (``lead_s``, ``LiveFloor``, ``SurvivalCheck``).
    """

    RECENT_FRACTION = 4  # the newest quarter of a window detects a change of level
    SHIFT_MIN_SAMPLES = 8  # ... and holds at least this many samples
    MEAN_ERROR = 0.05  # the windows hold enough samples to know their mean this closely
    RANGE_QUANTILE = 0.1  # a change of synthesis level must leave the deciles' range
    DROP_RUN_MIN = 3  # a GPU speed-up: this many GPU times in a row, at least one a worker more
    OLDER_MAX = 8  # a faster synthesis level: at most this many running older than it shows

    def __init__(self, gpu_window: int, synthesis_window: int, saved: Estimates) -> None:
        self._gpu_window = gpu_window
        self._synthesis_window = synthesis_window
        self._gpu = DurationWindow(
            gpu_window, self.SHIFT_MIN_SAMPLES, 1, saved.gpu_service_s, drop_run=self.DROP_RUN_MIN
        )
        self._syn = DurationWindow(
            synthesis_window,
            self._recent(synthesis_window),
            0,
            saved.synthesis_s,
            saved.synthesis_sd_s,
            outliers=False,
            range_quantile=self.RANGE_QUANTILE,
        )
        self._cohort: ColdCohort | None = None if saved.known else ColdCohort()
        self._floor = LiveFloor()
        self._survival = SurvivalCheck()
        self._rebased = 0  # the synthesis window's re-basings the check has seen
        self._running: tuple[float, tuple[float, ...], int] = (0.0, (), 0)  # at, ages, hung
        self._fitted: tuple[object, ...] = ()  # what the windows were last sized for
        self.failures = 0  # syntheses that failed or timed out
        self.version = 0  # bumped by every observation, so derived values can be cached

    def _recent(self, size: int, at_least: int = 0) -> int:
        return min(size, max(self.SHIFT_MIN_SAMPLES, size // self.RECENT_FRACTION, at_least))

    @property
    def gpu_service_s(self) -> float | None:
        return self._gpu.value

    @property
    def synthesis_s(self) -> float | None:
        return self._syn.value

    @property
    def synthesis_sd_s(self) -> float:
        return self._syn.sd

    @property
    def synthesis_cv(self) -> float:
        """The spread of synthesis durations over their mean (0 while none is known)."""
        return self._syn.cv

    @property
    def estimates(self) -> Estimates:
        return Estimates(self._gpu.value, self._syn.value, self._syn.sd)

    @property
    def known(self) -> bool:
        return len(self._gpu) > 0 and len(self._syn) > 0

    @property
    def cold_cohort_open(self) -> bool:
        """Some of the cold start's first syntheses are still running."""
        return self._cohort is not None

    @property
    def rebased(self) -> int:
        """Times either window was re-based (a change of level, saved estimates dropped, the
        cold start's cohort in): predictions made before then used another model."""
        return self._gpu.rebased + self._syn.rebased

    @property
    def shifts(self) -> tuple[int, int]:
        """Changes of level detected so far: (GPU service time, synthesis duration)."""
        return self._gpu.shifts, self._syn.shifts

    def fit(self, workers: int, in_synthesis: float) -> None:
        """Size the windows for the host: the GPU window holds at least 8 samples a worker,
        and (cv ÷ ``MEAN_ERROR``)² where its samples spread widely (partitions of several
        sizes: fewer hold too few runs of each, and T̂gpu swings with the window's mix), trims
        one a worker at each end (a stall of every worker is dropped whole), and its newest
        part holds more than 2 a worker (a stall stays a minority there); the synthesis
        window holds at least two lead times of completions, ``in_synthesis`` × 2 (its mean's
        noise, in partitions, does not grow with the rate), and as many as its spread needs
        (a heavy tail, partitions of several sizes)."""
        finite = math.isfinite(in_synthesis)
        wanted = max(self._synthesis_window, math.ceil(2 * in_synthesis)) if finite else -1
        key = (workers, wanted, self._gpu.stats, self._syn.stats)
        if key == self._fitted:
            return  # the same host and the same spreads: the same sizes
        self._fitted = key
        size = self._spread_size(self._gpu, max(self._gpu_window, 8 * workers))
        self._gpu.resize(
            size,
            max(self.SHIFT_MIN_SAMPLES, 2 * workers + 1),
            workers,
            drop_run=max(self.DROP_RUN_MIN, workers + 1),
        )
        if finite:
            size = self._spread_size(self._syn, wanted)
            self._syn.resize(size, self._recent(size))

    def _spread_size(self, window: DurationWindow, size: int) -> int:
        """``size``, doubled until the window's mean is known within ``MEAN_ERROR`` (its
        relative standard error, cv ÷ √n), at most ``MAX_WINDOW``: in doublings, so that the
        window is not resized at every sample."""
        if window.value:
            needed = (window.cv / self.MEAN_ERROR) ** 2
            size <<= max(0, math.ceil(math.log2(max(needed, 1.0) / size)))
        return min(MAX_WINDOW, size)

    def observe_gpu_service(self, seconds: float) -> None:
        self._gpu.add(seconds)
        self.version += 1

    def observe_synthesis(self, seconds: float, now: float) -> None:
        """A synthesis that took ``seconds`` finished at ``now`` (clock seconds)."""
        in_order = self._cohort is None
        self._syn.add(seconds, in_order=in_order, agrees=lambda level: self._agrees(level, now))
        self.version += 1
        if self._cohort is not None:
            self._close_cohort(self._cohort.completed(now, seconds))

    def observe_synthesis_failure(self, seconds: float, now: float) -> None:
        """A synthesis failed or timed out after ``seconds``, at ``now``.

        It leaves the cold-start cohort. Where it ran longer than T̂syn it also counts as a
        sample (censored: it would have taken at least that long), so syntheses that all time
        out still raise the estimate; a quicker failure says nothing about durations.
        """
        check_duration(seconds)
        self.failures += 1
        self.version += 1
        current = self._syn.value
        hung = current is not None and seconds > LiveFloor.HUNG_FACTOR * current
        if current is not None and seconds > current and self._cohort is None and not hung:
            self._syn.add(seconds)
        if self._cohort is not None:
            self._close_cohort(self._cohort.failed(now, seconds))

    def _agrees(self, level: list[float], now: float) -> bool:
        """Whether the syntheses running agree with a faster level whose samples are
        ``level`` (s). Hung ones aside, at most ``OLDER_MAX`` of them are older than its
        longest sample by the window's ``SHIFT_RATIO``, and at most ``OLDER_MAX`` or half as
        many as it holds are older than its median sample: those were sent with its samples
        or before them, and have not finished. Where partitions of several sizes are mixed,
        the small ones finish first, in waves: a run of them reads as a faster host while the
        large ones still run; after a burst of dispatch, those large ones are as old as the
        small ones' durations, not older than the longest."""
        at, ages, hung = self._running
        shift = now - at
        longest = max(level) * DurationWindow.SHIFT_RATIO
        if older_than(ages, longest - shift) - hung > self.OLDER_MAX:
            return False
        peers = older_than(ages, statistics.median(level) - shift) - hung
        return peers <= max(self.OLDER_MAX, len(level) / 2)

    def observe_running(self, now: float, synthesizing: int, ages_s: tuple[float, ...]) -> None:
        """What the pipeline runs now: ``synthesizing`` syntheses, the oldest of them
        dispatched ``ages_s`` ago, oldest first (empty: not told). Cohort members older than
        the oldest are gone; outside the cohort, the live floor follows the ages."""
        ages_s = ages_s if synthesizing > 0 else ()
        if self._cohort is None:
            estimate = self._syn.value or 0.0
            lead = max(estimate, self._floor.value_s, self._survival.lead_s)
            longest = self._syn.longest or None  # None while the window is empty
            self._floor.update(now, ages_s, estimate, lead, synthesizing, longest)
            self._running = (now, ages_s, self._floor.hung)
            if self._syn.rebased != self._rebased:
                self._rebased = self._syn.rebased
                self._survival.clear()  # the window holds the new level
            # Where more run than the observation lists, a snapshot of the oldest alone is
            # looked at sooner: against a settled window only, as one re-based lately holds
            # the new level's first (fastest) finishers.
            partial = synthesizing > len(ages_s) >= Observation.SYNTHESIS_AGES
            settled = 4 * len(self._syn) >= 3 * self._syn.size
            self._survival.update(
                now, ages_s, self._floor.hung, self._syn.ordered, estimate, partial and settled
            )
            return
        self._running = (now, ages_s, 0)
        if synthesizing == 0:
            self._close_cohort(self._cohort.forget_before(math.inf))
        elif ages_s:
            self._close_cohort(self._cohort.forget_before(now - ages_s[0]))

    def _close_cohort(self, cohort_mean: float | None) -> None:
        if cohort_mean is None or self._cohort is None:
            return
        # The whole cold-start cohort is in: its durations are unbiased, unlike its first
        # (fastest) finishers alone; they replace what the window holds.
        self._syn.replace(self._cohort.finished)
        self._cohort = None
        self.version += 1

    def cold_dispatched(self, at: float, count: int) -> None:
        """Dispatches made before any duration was known."""
        if self._cohort is not None:
            self._cohort.dispatched(at, count)

    def live_floor_s(self) -> float:
        """A floor on the lead time from the syntheses running (``LiveFloor``): in a steady
        state below T̂syn; when synthesis slows, it rises with the ages of those running long
        before the slow ones complete and enter the window."""
        return self._floor.value_s

    @property
    def floor_longest(self) -> float:
        """The live floor's history spans at least this many of the longest syntheses the
        window holds (``ControllerSettings.live_floor_longest``; 0: eight lead times)."""
        return self._floor.history_longest

    @floor_longest.setter
    def floor_longest(self, longest: float) -> None:
        self._floor.history_longest = longest

    @property
    def hung(self) -> int:
        """Syntheses running so long that they are hung (``LiveFloor.HUNG_FACTOR`` × T̂syn)."""
        return self._floor.hung

    @property
    def stuck(self) -> int:
        """Of the hung syntheses, those older than anything the window saw finish, by
        ``LiveFloor.SUSPECT_LONGEST``: no straggler of the host's own spread."""
        return self._floor.stuck

    def lead_s(self, now: float) -> float:
        """T̂syn, the synthesis lead time (s) the projection looks ahead.

        At least the live floor and a slowdown's lead time (``SurvivalCheck``), or while the
        cold-start cohort is still running, at least the cohort's censored mean: its first
        finishers are its fastest, so their average alone runs low and would starve the GPUs
        one synthesis later.
        """
        syn = self._syn.value or 0.0
        if self._cohort is not None:
            # The cohort's bound plays the floor's part: its first finishers, all the window
            # holds, are its fastest, so a margin drawn from them would be too thin.
            return max(syn, self._cohort.lower_bound(now))
        return max(syn, self.live_floor_s(), self._survival.lead_s)

    @property
    def slowdown(self) -> float:
        """The factor by which syntheses run slower than T̂syn's window says, from those that
        failed to finish (``SurvivalCheck``); 1 where none is seen."""
        return self._survival.factor

    def ready_wander_sd(self, rate_per_s: float, lead_s: float) -> float:
        """Standard deviation of the ready queue's wander at ``rate_per_s`` partitions a
        second, from the spread of both durations.

        Synthesis: each partition dispatched ``a`` seconds ago is still in synthesis with
        probability F̄(a), so the count in synthesis varies by rate × ∫ F̄(1 − F̄) da, taken
        from the samples (``DurationWindow.half_mean_difference``): rate × σsyn ÷ √π for
        durations spread normally, less for a heavy tail. GPUs: the number they consume in
        one lead time varies by rate × lead × (σgpu ÷ T̂gpu)² (each worker a renewal
        process), which matters where partitions of several sizes alternate.
        """
        synthesis = rate_per_s * self._syn.half_mean_difference
        cv = self._gpu.cv
        consumed = rate_per_s * lead_s * cv * cv if math.isfinite(rate_per_s) else 0.0
        return math.sqrt(synthesis + consumed)

    def flow_variance(self, rate_per_s: float) -> float:
        """How fast the ready queue's level spreads while every synthesis slot is busy
        (partitions² per second) at ``rate_per_s`` partitions a second in and out: the
        completions of the slots and the GPUs' takings are renewal processes, each of
        variance rate × cv² a second, so rate × (cv²syn + cv²gpu)."""
        return rate_per_s * (self._syn.cv**2 + self._gpu.cv**2)
