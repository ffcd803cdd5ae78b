"""A duration estimated from a window of its recent samples (``DurationWindow``).

BBR estimates a network path from windowed filters rather than from exponential averages;
pacer's durations follow the same idea. The window's extremes are trimmed, so one GPU stall
(a long sample per worker) moves the estimate not at all, and a real change of level is
followed as soon as the window's newest part lies beyond the older samples (those are then
dropped).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable

# Told the samples (s) of a shorter level the window would move to, in the order they came:
# whether to believe it (the syntheses running agree with it).
Agrees = Callable[[list[float]], bool]

MAX_WINDOW = 4096  # samples: a window is summed again every 1/16 of it
SPREAD_SAMPLES = 512  # the spread of a wider window is taken from this many of its samples


def check_duration(sample: float) -> None:
    if not math.isfinite(sample) or sample < 0:
        raise ValueError(f"a duration must be a finite number of seconds >= 0, got {sample}")


def _median(values: list[float]) -> float:
    return _median_sorted(sorted(values))


def _median_sorted(ordered: list[float]) -> float:
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


class DurationWindow:
    """A duration estimated from the last ``size`` samples.

    The estimate is a trimmed mean: the ``trim`` longest and ``trim`` shortest samples are
    left out (a GPU stall shows as one long sample per worker: with ``trim`` = the workers
    it moves nothing), and with ``outliers`` so are samples beyond ``OUTLIER_RATIO`` times
    the median either way. A mean rather than a median because Little's law counts the mean,
    and because a median flips from one level to the other where partitions of two sizes
    alternate. Synthesis keeps every sample (``outliers=False``): a heavy tail is real, and
    its mean is what the lead time must be; a hung synthesis never completes, and the
    controller tells it apart by its age (``pacer.control.live_floor``).

    A change of level: when the median of the newest ``recent`` samples lies beyond the range
    of the older ones (their shortest ÷ ``SHIFT_RATIO`` to their longest × ``SHIFT_RATIO``,
    trimmed as above; with ``range_quantile`` q, their q and 1 − q quantiles instead, so that
    a heavy tail does not stretch the range), only the newest samples beyond it are kept, so a
    GPU that
    speeds up or a synthesis that slows down is followed after about ``recent / 2`` samples.
    The window must hold half its size (and twice ``recent``), and ``recent`` samples added
    one by one since it was last replaced, before it looks again (samples handed over at
    once, as a cold start's first cohort in order of completion, are no time series): where
    partitions of two sizes alternate in runs shorter than that, the window then spans both
    levels, neither lies beyond its range, and nothing more is dropped. The samples dropped at
    a change of level are set aside for a window's worth of samples: if the old level comes
    back meanwhile (runs of two sizes in turn, longer than half a window), they return.

    A drop, at once: with ``drop_run`` set, a run of that many newest samples, every one
    shorter than the older ones' range, is a new level as soon as it is complete, without
    waiting for the median of ``recent``. Interference on a proving host (a stall, a
    neighbour, contention) only lengthens a duration, so a sample shorter than anything the
    window holds is news, not noise, as in BBR where a delivery rate above the windowed
    maximum is believed at once; a longer one may be a stall, and needs the median.

    A shorter level may be vetoed: ``add``'s ``agrees`` is told the samples of the level the
    window would move to, and where it says no, the window keeps its samples. Synthesis
    passes the ages of the syntheses running: where partitions of several sizes finish in
    waves (the short ones first), a run of short ones looks like a faster host while the long
    ones still running, as old as the new level's samples or older, show it is not.

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
        drop_run: int | None = None,
        *,
        outliers: bool = True,
        range_quantile: float = 0.0,
    ) -> None:
        if not 0 <= range_quantile < 0.5:
            raise ValueError(f"range_quantile must be in [0, 0.5), got {range_quantile}")
        if size < 2 or not 1 <= recent <= size or trim < 0:
            rule = "size >= 2, 1 <= recent <= size, trim >= 0"
            raise ValueError(f"need {rule}; got size {size}, recent {recent}, trim {trim}")
        self._size = size
        self._recent = recent
        self._trim = trim
        self._drop_run = drop_run
        self._outliers = outliers
        self._range_quantile = range_quantile
        self._drop_below = 0.0  # the older samples' range starts here (0: not settled)
        self._below = 0  # newest samples in a row below _drop_below
        self._samples: deque[float] = deque(maxlen=size)  # in the order they came
        self._sorted: list[float] = []  # the same, in order of duration
        self._prior: float | None = None
        self._fresh: list[float] = []  # the first fresh samples, while a prior is held
        self._since_check = 0
        self._since_replace = 0
        self._since_stats = 0
        self._stash: list[float] = []  # the old level's samples, dropped at a change of level
        self._stash_left = 0  # samples until the stash is forgotten
        # (value, sd, longest, half the mean difference), cached
        self._stats: tuple[float, float, float, float] | None = None
        self.shifts = 0  # changes of level detected
        self.rebased = 0  # times the samples were replaced: a new level, the old one back, ...
        if prior is not None:
            check_duration(prior)
            self._prior = prior
            # PRIOR_SAMPLES samples with the saved mean and spread (sample sd = prior_sd).
            half = self.PRIOR_SAMPLES // 2
            step = prior_sd * math.sqrt((self.PRIOR_SAMPLES - 1) / self.PRIOR_SAMPLES)
            for i in range(self.PRIOR_SAMPLES):
                self._samples.append(max(0.0, prior + (step if i < half else -step)))
            self._sorted = sorted(self._samples)

    def __len__(self) -> int:
        return len(self._samples)

    @property
    def size(self) -> int:
        return self._size

    def resize(
        self, size: int, recent: int, trim: int | None = None, drop_run: int | None = None
    ) -> None:
        """Hold ``size`` samples, detect shifts over the newest ``recent`` (and drops over a
        run of ``drop_run``), and trim ``trim`` at each end (a wider host needs a wider
        window: each of its W workers may add one stalled sample at once)."""
        trim = self._trim if trim is None else trim
        drop_run = self._drop_run if drop_run is None else drop_run
        if (size, recent, trim, drop_run) == (self._size, self._recent, self._trim,
                                              self._drop_run):  # fmt: skip
            return
        self._size, self._recent, self._trim = size, min(recent, size), trim
        self._drop_run = drop_run
        self._samples = deque(self._samples, maxlen=size)
        self._sorted = sorted(self._samples)
        self._stats = None

    def add(self, sample: float, *, in_order: bool = True, agrees: Agrees | None = None) -> None:
        """Add a sample; ``in_order=False`` where samples do not come as a time series (a
        cold start's first cohort completes fastest first): no change of level is looked for.
        A shorter level is moved to only where ``agrees`` (if given) says yes to its
        samples.
        """
        check_duration(sample)
        if len(self._samples) == self._size:
            del self._sorted[bisect.bisect_left(self._sorted, self._samples[0])]
        self._samples.append(sample)
        bisect.insort(self._sorted, sample)
        self._since_stats += 1
        if self._since_stats >= max(1, self._size // 16):
            self._stats = None  # a wide window is summed again every 1/16 of it
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
        self._below = self._below + 1 if sample < self._drop_below else 0
        if self._drop_run and self._below >= self._drop_run and self._dropped(agrees):
            return
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
            self._detect_shift(agrees)
            if self._drop_run and len(self._samples) > self._drop_run:
                older = self._range(list(self._samples)[: -self._drop_run])
                self._drop_below = older[0] / self.SHIFT_RATIO

    def replace(self, samples: list[float]) -> None:
        """Hold exactly ``samples`` (the newest ``size`` of them), forgetting the rest."""
        self.rebased += 1
        self._samples = deque(samples, maxlen=self._size)
        self._sorted = sorted(self._samples)
        self._prior, self._fresh = None, []
        self._stats = None
        self._since_replace = 0
        self._stash = []
        self._drop_below, self._below = 0.0, 0

    def _kept(self, samples: list[float]) -> list[float]:
        """``samples`` sorted, less the ``trim`` at each end and (with ``outliers``) the
        outliers."""
        return self._trimmed(sorted(samples))

    def _trimmed(self, ordered: list[float]) -> list[float]:
        """``ordered`` (sorted) less the ``trim`` at each end and the outliers."""
        trim = min(self._trim, (len(ordered) - 1) // 2)
        if trim:
            ordered = ordered[trim:-trim]
        if not self._outliers:
            return ordered
        median = _median_sorted(ordered)
        low = bisect.bisect_left(ordered, median / self.OUTLIER_RATIO)
        high = bisect.bisect_right(ordered, median * self.OUTLIER_RATIO)
        return ordered[low:high] or ordered

    def _range(self, samples: list[float]) -> tuple[float, float]:
        """The range of ``samples`` a change of level must leave: the shortest and longest
        kept, or their ``range_quantile`` quantiles."""
        kept = self._kept(samples)
        q = self._range_quantile
        if q <= 0:
            return kept[0], kept[-1]
        last = len(kept) - 1
        return kept[int(q * last)], kept[math.ceil((1 - q) * last)]

    def _back_to_stash(self, level: float | None = None) -> bool:
        """The old level is back within a window (``level``, or the median of the newest
        samples): partitions of two sizes in turn, not a change of level. Both levels'
        samples are kept from then on."""
        if not self._stash:
            return False
        samples = list(self._samples)
        recent = _median(samples[-self._recent :]) if level is None else level
        low, high = self._range(self._stash)
        if not low / self.SHIFT_RATIO <= recent <= high * self.SHIFT_RATIO:
            return False
        self.shifts -= 1
        merged = self._stash + samples
        self.replace(merged)
        self._since_replace = self._recent  # samples as they came: no cohort
        return True

    def _detect_shift(self, agrees: Agrees | None) -> None:
        samples = list(self._samples)
        low, high = self._range(samples[: -self._recent])
        newest = samples[-self._recent :]
        high, low = high * self.SHIFT_RATIO, low / self.SHIFT_RATIO
        recent = _median(newest)
        if recent > high:
            self._new_level(samples, [s for s in newest if s > high], len(newest))
        elif recent < low:
            self._new_level(samples, [s for s in newest if s < low], len(newest), agrees)

    def _dropped(self, agrees: Agrees | None) -> bool:
        """The newest ``drop_run`` samples all lie below the older ones' range: a new level
        (unless ``agrees`` says no)."""
        assert self._drop_run is not None
        samples = list(self._samples)
        if len(samples) <= self._drop_run or self._since_replace < self._drop_run:
            return False
        newest = samples[-self._drop_run :]
        if max(newest) >= self._range(samples[: -self._drop_run])[0] / self.SHIFT_RATIO:
            return False
        return self._new_level(samples, newest, len(newest), agrees)

    def _new_level(
        self, samples: list[float], beyond: list[float], newest: int, agrees: Agrees | None = None
    ) -> bool:
        """Keep only ``beyond``, the newest samples that lie beyond the old range, and the
        older ones (all but the ``newest``) aside for a window, in case the old level comes
        back (unless it is back already); a shorter level only where ``agrees`` says yes.
        Whether the samples were replaced."""
        if self._back_to_stash(_median(beyond)):
            return True
        if agrees is not None and not agrees(beyond):
            return False
        self.shifts += 1
        self.replace(beyond)
        self._stash, self._stash_left = samples[:-newest], self._size
        return True

    def _compute(self) -> tuple[float, float, float, float]:
        if self._stats is None:
            kept = self._trimmed(self._sorted)
            n = len(kept)
            mean = sum(kept) / n
            # The spread of a wide window from an even share of its samples in order of
            # duration: a stratified sample, as exact as the sd needs, at a fixed cost.
            some = kept[:: max(1, n // SPREAD_SAMPLES)]
            m = len(some)
            var, diff = 0.0, 0.0
            if m > 1:
                var = sum((s - mean) ** 2 for s in some) / (m - 1)
                # E|X − X'| of sorted samples: Σ (2i − m + 1)·x_i ÷ (m(m − 1) ÷ 2), i from 0.
                diff = sum((2 * i - m + 1) * x for i, x in enumerate(some)) / (m * (m - 1) / 2)
            # Equal samples sum to a rounding error, which may be below 0.
            self._stats = (mean, math.sqrt(var), kept[-1], max(0.0, diff) / 2)
            self._since_stats = 0
        return self._stats

    def _summed(self) -> tuple[float, float, float, float] | None:
        """The window's statistics (mean, sd, longest, half the mean difference), summed
        where they are not cached; None while it is empty."""
        return self._compute() if self._samples else None

    @property
    def stats(self) -> tuple[float, float, float, float] | None:
        """(mean, sd, longest, half the mean difference) as last summed; a new tuple, or
        None, whenever they may have changed."""
        return self._stats or self._summed()

    @property
    def value(self) -> float | None:
        stats = self._stats or self._summed()  # the cached statistics at the cost of a read
        return stats[0] if stats else None

    @property
    def sd(self) -> float:
        """Standard deviation of one sample (trimmed samples and outliers left out)."""
        stats = self._stats or self._summed()
        return stats[1] if stats else 0.0

    @property
    def cv(self) -> float:
        """The coefficient of variation of one sample, sd ÷ mean (0 while empty)."""
        stats = self._stats or self._summed()
        return stats[1] / stats[0] if stats and stats[0] else 0.0

    @property
    def half_mean_difference(self) -> float:
        """Half the mean difference of two samples, E|X − X'| ÷ 2 = ∫ F(1 − F): σ ÷ √π for a
        normal spread, less for a heavy tail, whose spread is in a few long samples."""
        stats = self._stats or self._summed()
        return stats[3] if stats else 0.0

    @property
    def ordered(self) -> list[float]:
        """Every sample in the window, shortest first (the window's own list: read only)."""
        return self._sorted

    @property
    def longest(self) -> float:
        """The longest sample in the window (trimmed samples and outliers left out)."""
        stats = self._stats or self._summed()
        return stats[2] if stats else 0.0
