"""Duration estimates the controller paces by, from windows of recent samples.

GPU service time and synthesis duration are each estimated from a window of their last
samples (``DurationWindow``), as BBR estimates a path from windowed filters rather than from
exponential averages: the window's extremes are trimmed, so one GPU stall (a long sample per
worker) moves the estimate not at all, and a real change of level is followed as soon as the
window's newest part lies beyond the older samples (those are then dropped). The synthesis
duration also keeps its spread, because the spread of synthesis times sets how far the ready
queue wanders, and a live floor: syntheses still running after far longer than any recent
one took show a slowdown before any slow one completes.
A cold start adds a censored estimate of its first cohort (``ColdCohort``).

Saved estimates (``Estimates``) count as a few samples, not as settled, and are dropped when
the first fresh samples disagree with them by more than a factor of two; the service keeps
them under ``estimates_key``, so a host that changed workload, size, GPU or cores starts cold
instead of from someone else's numbers.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass


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


MAX_WINDOW = 4096  # samples: a window is summed again every 1/32 of it


def _check(sample: float) -> None:
    if not math.isfinite(sample) or sample < 0:
        raise ValueError(f"a duration must be a finite number of seconds >= 0, got {sample}")


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


class DurationWindow:
    """A duration estimated from the last ``size`` samples.

    The estimate is a trimmed mean: the ``trim`` longest and ``trim`` shortest samples are
    left out (a GPU stall shows as one long sample per worker: with ``trim`` = the workers
    it moves nothing), and so are samples beyond ``OUTLIER_RATIO`` times the median either
    way. A mean rather than a median because Little's law counts the mean, and because a
    median flips from one level to the other where partitions of two sizes alternate.

    A change of level: when the median of the newest ``recent`` samples lies beyond the range
    of the older ones (their shortest ÷ ``SHIFT_RATIO`` to their longest × ``SHIFT_RATIO``,
    trimmed as above), only the newest samples beyond that range are kept, so a GPU that
    speeds up or a synthesis that slows down is followed after about ``recent / 2`` samples.
    The window must hold half its size (and twice ``recent``), and ``recent`` samples added
    one by one since it was last replaced, before it looks again (samples handed over at
    once, as a cold start's first cohort in order of completion, are no time series): where
    partitions of two sizes alternate in runs shorter than that, the window then spans both
    levels, neither lies beyond its range, and nothing more is dropped. The samples dropped at
    a change of level are set aside for a window's worth of samples: if the old level comes
    back meanwhile (runs of two sizes in turn, longer than half a window), they return.

    A prior (saved estimates) enters as ``PRIOR_SAMPLES`` samples; it is dropped as soon as
    the median of the fresh samples so far (the first ``PRIOR_SAMPLES`` of them) differs from
    it by more than ``PRIOR_RATIO``.

    >>> w = DurationWindow(size=8, recent=4, trim=1)
    >>> for s in (1.0, 1.1, 0.9, 30.0, 1.0, 1.0):
    ...     w.add(s)
    >>> round(w.value, 3)  # the 30 s stall and the 0.9 s are trimmed
    1.025
    """

    SHIFT_RATIO = 1.2
    OUTLIER_RATIO = 8.0
    PRIOR_SAMPLES = 4
    PRIOR_RATIO = 2.0

    def __init__(
        self,
        size: int,
        recent: int,
        trim: int = 0,
        prior: float | None = None,
        prior_sd: float = 0.0,
    ) -> None:
        if size < 2 or not 1 <= recent <= size or trim < 0:
            rule = "size >= 2, 1 <= recent <= size, trim >= 0"
            raise ValueError(f"need {rule}; got size {size}, recent {recent}, trim {trim}")
        self._size = size
        self._recent = recent
        self._trim = trim
        self._samples: deque[float] = deque(maxlen=size)
        self._prior: float | None = None
        self._fresh: list[float] = []  # the first fresh samples, while a prior is held
        self._since_check = 0
        self._since_replace = 0
        self._since_stats = 0
        self._stash: list[float] = []  # the old level's samples, dropped at a change of level
        self._stash_left = 0  # samples until the stash is forgotten
        self._stats: tuple[float, float, float] | None = None  # (value, sd, longest), cached
        self.shifts = 0  # changes of level detected
        if prior is not None:
            _check(prior)
            self._prior = prior
            # PRIOR_SAMPLES samples with the saved mean and spread (sample sd = prior_sd).
            half = self.PRIOR_SAMPLES // 2
            step = prior_sd * math.sqrt((self.PRIOR_SAMPLES - 1) / self.PRIOR_SAMPLES)
            for i in range(self.PRIOR_SAMPLES):
                self._samples.append(max(0.0, prior + (step if i < half else -step)))

    def __len__(self) -> int:
        return len(self._samples)

    @property
    def size(self) -> int:
        return self._size

    def resize(self, size: int, recent: int, trim: int | None = None) -> None:
        """Hold ``size`` samples, detect shifts over the newest ``recent``, and trim
        ``trim`` at each end (a wider host needs a wider window: each of its W workers may
        add one stalled sample at once)."""
        trim = self._trim if trim is None else trim
        if (size, recent, trim) == (self._size, self._recent, self._trim):
            return
        self._size, self._recent, self._trim = size, min(recent, size), trim
        self._samples = deque(self._samples, maxlen=size)
        self._stats = None

    def add(self, sample: float, *, in_order: bool = True) -> None:
        """Add a sample; ``in_order=False`` where samples do not come as a time series (a
        cold start's first cohort completes fastest first): no change of level is looked for.
        """
        _check(sample)
        self._samples.append(sample)
        self._since_stats += 1
        if self._since_stats >= max(1, self._size // 32):
            self._stats = None  # a wide window is summed again every 1/32 of it
        if self._prior is not None:
            self._fresh.append(sample)
            ratio = _median(self._fresh) / self._prior if self._prior > 0 else math.inf
            if not 1 / self.PRIOR_RATIO <= ratio <= self.PRIOR_RATIO:
                self.replace(self._fresh)  # the saved estimates describe something else
            elif len(self._fresh) >= self.PRIOR_SAMPLES:
                self._prior, self._fresh = None, []  # confirmed: ages out as a sample
            self._stats = None
            return
        if not in_order:
            self._since_replace = 0
            return
        self._since_check += 1
        self._since_replace += 1
        if self._stash:
            self._stash_left -= 1
            if self._stash_left <= 0:
                self._stash = []
            elif self._since_check >= max(1, self._recent // 4) and self._back_to_stash():
                return
        settled = max(2 * self._recent, self._size // 2)
        if (
            len(self._samples) >= settled
            and self._since_replace >= self._recent  # the newest part: samples as they came
            and self._since_check >= max(1, self._recent // 4)
        ):
            self._since_check = 0
            self._detect_shift()

    def replace(self, samples: list[float]) -> None:
        """Hold exactly ``samples`` (the newest ``size`` of them), forgetting the rest."""
        self._samples = deque(samples, maxlen=self._size)
        self._prior, self._fresh = None, []
        self._stats = None
        self._since_replace = 0
        self._stash = []

    def _kept(self, samples: list[float]) -> list[float]:
        """``samples`` sorted, less the ``trim`` at each end and the outliers."""
        ordered = sorted(samples)
        trim = min(self._trim, (len(ordered) - 1) // 2)
        if trim:
            ordered = ordered[trim:-trim]
        median = _median(ordered)
        low, high = median / self.OUTLIER_RATIO, median * self.OUTLIER_RATIO
        return [s for s in ordered if low <= s <= high] or ordered

    def _back_to_stash(self, level: float | None = None) -> bool:
        """The old level is back within a window (``level``, or the median of the newest
        samples): partitions of two sizes in turn, not a change of level. Both levels'
        samples are kept from then on."""
        if not self._stash:
            return False
        samples = list(self._samples)
        recent = _median(samples[-self._recent :]) if level is None else level
        stash = self._kept(self._stash)
        if not stash[0] / self.SHIFT_RATIO <= recent <= stash[-1] * self.SHIFT_RATIO:
            return False
        self.shifts -= 1
        merged = self._stash + samples
        self.replace(merged)
        self._since_replace = self._recent  # samples as they came: no cohort
        return True

    def _detect_shift(self) -> None:
        samples = list(self._samples)
        older = self._kept(samples[: -self._recent])
        newest = samples[-self._recent :]
        high, low = older[-1] * self.SHIFT_RATIO, older[0] / self.SHIFT_RATIO
        recent = _median(newest)
        if recent > high or recent < low:
            beyond = (
                [s for s in newest if s > high] if recent > high else [s for s in newest if s < low]
            )
            if self._back_to_stash(_median(beyond)):
                return
            # A new level: keep only the newest samples that lie beyond the old range, and
            # the old ones aside for a window, in case the old level comes back.
            self.shifts += 1
            self.replace(beyond)
            self._stash, self._stash_left = samples[: -self._recent], self._size

    def _compute(self) -> tuple[float, float, float]:
        if self._stats is None:
            kept = self._kept(list(self._samples))
            n = len(kept)
            mean = sum(kept) / n
            var = sum((s - mean) ** 2 for s in kept) / (n - 1) if n > 1 else 0.0
            self._stats = (mean, math.sqrt(var), kept[-1])
            self._since_stats = 0
        return self._stats

    @property
    def value(self) -> float | None:
        return self._compute()[0] if self._samples else None

    @property
    def sd(self) -> float:
        """Standard deviation of one sample (trimmed samples and outliers left out)."""
        return self._compute()[1] if self._samples else 0.0

    @property
    def longest(self) -> float:
        """The longest sample in the window (trimmed samples and outliers left out)."""
        return self._compute()[2] if self._samples else 0.0


class ColdCohort:
    """The syntheses of a cold start, for a censored estimate of their mean duration.

    All were dispatched before any duration was known; the first to finish are the fastest.
    While some still run, ``(Σ finished + Σ age of those running) ÷ N`` bounds the cohort's
    mean from below, and rises toward it as the cohort completes; once all are in, their mean
    is unbiased. A completion belongs to the cohort when its dispatch time (now − duration)
    matches a cohort dispatch within ``MATCH_S``: later partitions that overtake a slow cohort
    member must not stand in for it, or the mean comes out low.

    A member that failed (``failed``), or that is no longer running (``forget_before``: older
    than the oldest synthesis the pipeline still runs), leaves the cohort without a duration,
    so one lost synthesis cannot hold the cohort open, and its bound growing, for ever.
    """

    MATCH_S = 0.25

    def __init__(self) -> None:
        self._pending: dict[float, int] = {}  # dispatch time → members still running
        self._size = 0
        self._finished: list[float] = []

    @property
    def finished(self) -> list[float]:
        return list(self._finished)

    def dispatched(self, at: float, count: int) -> None:
        self._pending[at] = self._pending.get(at, 0) + count
        self._size += count

    def _take(self, origin: float) -> bool:
        match = min(self._pending, key=lambda at: abs(at - origin), default=None)
        if match is None or abs(match - origin) > self.MATCH_S:
            return False
        self._pending[match] -= 1
        if self._pending[match] == 0:
            del self._pending[match]
        return True

    def _mean_if_complete(self) -> float | None:
        if self._pending or not self._finished:
            return None
        return sum(self._finished) / len(self._finished)

    def completed(self, now: float, seconds: float) -> float | None:
        """Record a finished synthesis; the cohort mean once all members are in, else None."""
        if not self._take(now - seconds):
            return None
        self._finished.append(seconds)
        return self._mean_if_complete()

    def failed(self, now: float, seconds: float) -> float | None:
        """A member failed after ``seconds``: it leaves the cohort without a duration.
        The cohort mean if that was the last one running (and some finished), else None."""
        if not self._take(now - seconds):
            return None
        self._size -= 1
        return self._mean_if_complete()

    def forget_before(self, at: float) -> float | None:
        """Members dispatched before ``at`` are no longer running (the oldest synthesis still
        running started at ``at``): they leave the cohort. The cohort mean if none is left
        running (and some finished), else None."""
        gone = [t for t in self._pending if t < at - self.MATCH_S]
        if not gone:
            return None
        for t in gone:
            self._size -= self._pending.pop(t)
        return self._mean_if_complete()

    def lower_bound(self, now: float) -> float:
        if self._size <= 0:
            return 0.0
        running = sum(count * (now - at) for at, count in self._pending.items())
        return (sum(self._finished) + running) / self._size


class Estimator:
    """Keeps the estimates up to date from observed durations.

    T̂gpu is the mean of the last ``gpu_window`` GPU service times (at least 8 per worker, and
    more where they spread widely: enough to know the mean within ``GPU_MEAN_ERROR``), less
    the W longest and W shortest: a stall that holds every worker adds one long sample
    each, and those are the ones left out. T̂syn is the mean of the last ``synthesis_window``
    synthesis durations (at least two lead times of them), with their spread. Both drop
    older samples on a change of level (``DurationWindow``). The lead time the projection
    looks ahead is T̂syn, raised by the cold start's censored cohort mean and by the live
    floor (``lead_s``).
    """

    RECENT_FRACTION = 4  # the newest quarter of a window detects a change of level
    SHIFT_MIN_SAMPLES = 8  # ... and holds at least this many samples
    FLOOR_SIGMAS = 2.0  # margin of the live floor, beyond the longest recent synthesis
    FLOOR_RANK = 3  # the live floor follows the third oldest synthesis running
    GPU_MEAN_ERROR = 0.05  # the GPU window holds enough samples to know T̂gpu this closely

    def __init__(self, gpu_window: int, synthesis_window: int, saved: Estimates) -> None:
        self._gpu_window = gpu_window
        self._synthesis_window = synthesis_window
        self._gpu = DurationWindow(gpu_window, self.SHIFT_MIN_SAMPLES, 1, saved.gpu_service_s)
        self._syn = DurationWindow(
            synthesis_window,
            self._recent(synthesis_window),
            0,
            saved.synthesis_s,
            saved.synthesis_sd_s,
        )
        self._cohort: ColdCohort | None = None if saved.known else ColdCohort()
        self._ages_s: tuple[float, ...] = ()
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
    def shifts(self) -> tuple[int, int]:
        """Changes of level detected so far: (GPU service time, synthesis duration)."""
        return self._gpu.shifts, self._syn.shifts

    def fit(self, workers: int, in_synthesis: float) -> None:
        """Size the windows for the host: the GPU window holds at least 8 samples a worker,
        and (cv ÷ ``GPU_MEAN_ERROR``)² where its samples spread widely (partitions of several
        sizes: fewer hold too few runs of each, and T̂gpu swings with the window's mix), trims
        one a worker at each end (a stall of every worker is dropped whole), and its newest
        part holds more than 2 a worker (a stall stays a minority there); the
        synthesis window holds at least two lead times of completions, ``in_synthesis`` × 2
        (its mean's noise, in partitions, does not grow with the rate)."""
        size = max(self._gpu_window, 8 * workers)
        gpu = self._gpu.value
        if gpu:
            # Enough samples for the mean to be known within GPU_MEAN_ERROR (its relative
            # standard error, cv ÷ √n), in doublings of the base size so that the window
            # is not resized at every sample.
            needed = (self._gpu.sd / gpu / self.GPU_MEAN_ERROR) ** 2
            size <<= max(0, math.ceil(math.log2(max(needed, 1.0) / size)))
        self._gpu.resize(
            min(MAX_WINDOW, size), max(self.SHIFT_MIN_SAMPLES, 2 * workers + 1), workers
        )
        if math.isfinite(in_synthesis):
            size = min(MAX_WINDOW, max(self._synthesis_window, math.ceil(2 * in_synthesis)))
            self._syn.resize(size, self._recent(size))

    def observe_gpu_service(self, seconds: float) -> None:
        self._gpu.add(seconds)
        self.version += 1

    def observe_synthesis(self, seconds: float, now: float) -> None:
        """A synthesis that took ``seconds`` finished at ``now`` (clock seconds)."""
        self._syn.add(seconds, in_order=self._cohort is None)
        self.version += 1
        if self._cohort is not None:
            self._close_cohort(self._cohort.completed(now, seconds))

    def observe_synthesis_failure(self, seconds: float, now: float) -> None:
        """A synthesis failed or timed out after ``seconds``, at ``now``.

        It leaves the cold-start cohort. Where it ran longer than T̂syn it also counts as a
        sample (censored: it would have taken at least that long), so syntheses that all time
        out still raise the estimate; a quicker failure says nothing about durations.
        """
        _check(seconds)
        self.failures += 1
        self.version += 1
        current = self._syn.value
        if current is not None and seconds > current and self._cohort is None:
            self._syn.add(seconds)
        if self._cohort is not None:
            self._close_cohort(self._cohort.failed(now, seconds))

    def observe_running(self, now: float, synthesizing: int, ages_s: tuple[float, ...]) -> None:
        """What the pipeline runs now: ``synthesizing`` syntheses, the oldest of them
        dispatched ``ages_s`` ago, oldest first (empty: not told). Cohort members older than
        the oldest are gone."""
        self._ages_s = ages_s if synthesizing > 0 else ()
        if self._cohort is None:
            return
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
        """A floor on the lead time from the syntheses running: the age of the
        ``FLOOR_RANK``-th oldest, less how much longer than T̂syn the longest recent synthesis
        took and ``FLOOR_SIGMAS`` spreads.

        In a steady state the oldest running syntheses are about as old as the longest recent
        one, and the floor stays below T̂syn. When synthesis slows, all that run age past
        anything seen, and the floor rises with them (about one second a second) long before
        the slow ones complete and enter the window. Not the oldest: one straggler, or one
        hung synthesis, must not raise the lead time of all.
        """
        estimate = self._syn.value
        if not self._ages_s or estimate is None:
            return 0.0
        age = self._ages_s[min(self.FLOOR_RANK, len(self._ages_s)) - 1]
        margin = (self._syn.longest - estimate) + self.FLOOR_SIGMAS * self._syn.sd
        return age - margin

    def lead_s(self, now: float) -> float:
        """T̂syn, the synthesis lead time (s) the projection looks ahead.

        At least the live floor, or while the cold-start cohort is still running, at least
        the cohort's censored mean: its first finishers are its fastest, so their average
        alone runs low and would starve the GPUs one synthesis later.
        """
        syn = self._syn.value or 0.0
        if self._cohort is not None:
            # The cohort's bound plays the floor's part: its first finishers, all the window
            # holds, are its fastest, so a margin drawn from them would be too thin.
            return max(syn, self._cohort.lower_bound(now))
        return max(syn, self.live_floor_s())

    def ready_wander_sd(self, rate_per_s: float, lead_s: float) -> float:
        """Standard deviation of the ready queue's wander at ``rate_per_s`` partitions a
        second, from the spread of both durations.

        Synthesis: each partition dispatched ``a`` seconds ago is still in synthesis with
        probability F̄(a), so the count in synthesis varies by rate × ∫ F̄(1 − F̄) da, which
        is rate × σsyn ÷ √π for durations spread normally. GPUs: the number they consume in
        one lead time varies by rate × lead × (σgpu ÷ T̂gpu)² (each worker a renewal
        process), which matters where partitions of several sizes alternate.
        """
        synthesis = rate_per_s * self._syn.sd / math.sqrt(math.pi)
        gpu = self._gpu.value
        cv = self._gpu.sd / gpu if gpu else 0.0
        consumed = rate_per_s * lead_s * cv * cv if math.isfinite(rate_per_s) else 0.0
        return math.sqrt(synthesis + consumed)
