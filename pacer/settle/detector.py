"""Detecting when used memory has settled: sizes, trends, the detector."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ByteSize, TypeAdapter, ValidationError

GIB = 2**30
DEFAULT_TOLERANCE = "2GiB"
DEFAULT_WINDOW_S = 30.0
DEFAULT_INTERVAL_S = 1.0
DEFAULT_TIMEOUT_S = 900.0
DEFAULT_PROCESS_NAME = "pacer"
DEFAULT_STATE_FILE = Path("/var/lib/pacer/settle.json")
PROGRESS_EVERY_S = 10.0
COMM_LEN = 15  # the kernel keeps the first 15 bytes of a process name (TASK_COMM_LEN - 1)

Reason = Literal["baseline", "stable", "timeout"]

SIZE_RULE = (
    "give bytes or a number with a unit, e.g. 230GiB, 512MiB, 1.5TiB "
    "(KiB/MiB/GiB/TiB are powers of 1024, K/M/G/T powers of 1000, as in PACER_* sizes)"
)
_BYTE_SIZE = TypeAdapter(ByteSize)


def parse_size(text: str) -> int:
    """Bytes in ``text``: plain bytes or a number with a unit, parsed as pydantic's ByteSize
    (the parser of every ``PACER_*`` size), so ``G`` is 10**9 and ``GiB`` 2**30.

    >>> parse_size("230GiB"), parse_size("2G"), parse_size("4096")
    (246960619520, 2000000000, 4096)
    """
    try:
        return int(_BYTE_SIZE.validate_python(text.strip()))
    except ValidationError:
        raise ValueError(f"{text!r} is not a size: {SIZE_RULE}") from None


def gib(n_bytes: float) -> str:
    """``"231.2 GiB"``; two significant digits below 1 GiB (``"0.25 GiB"``)."""
    value = n_bytes / GIB
    return f"{value:.1f} GiB" if abs(value) >= 1 or value == 0 else f"{value:.2g} GiB"


# --- decision -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trend:
    """Used memory over the trailing window, as far back as the samples reach."""

    span_s: float  # from the oldest sample kept to the newest
    change_bytes: int  # newest − oldest: negative while memory drains
    spread_bytes: int  # max − min
    covered: bool  # the samples reach back a whole window

    def words(self) -> str:
        """``"falling 12.3 GiB over the last 30 s"``."""
        if self.span_s == 0:
            return "first sample"
        over = f"over the last {self.span_s:.3g} s"
        if self.change_bytes == 0:
            return f"flat {over}"
        way = "falling" if self.change_bytes < 0 else "rising"
        return f"{way} {gib(abs(self.change_bytes))} {over}"


@dataclass(frozen=True)
class Verdict:
    """Memory counts as settled at ``t_s``: back at the baseline, or stable over a window."""

    reason: Literal["baseline", "stable"]
    t_s: float
    used_bytes: int
    trend: Trend


class SettleDetector:
    """Decides, one sample at a time, whether used memory has settled.

    Settled when ``used <= baseline + tolerance`` (the level is back), or when max − min of the
    samples over the last ``window_s`` seconds is below the tolerance and those samples reach
    back a whole window (one sample at or before ``t − window_s`` is kept for that, and counts
    in max − min). Never stable on a partial window.

    >>> d = SettleDetector(baseline_bytes=None, tolerance_bytes=10, window_s=2.0)
    >>> [d.add(t, used) is not None for t, used in [(0, 100), (1, 90), (2, 89), (3, 88)]]
    [False, False, False, True]
    """

    def __init__(self, baseline_bytes: int | None, tolerance_bytes: int, window_s: float) -> None:
        if baseline_bytes is not None and baseline_bytes < 0:
            raise ValueError(f"baseline_bytes must be >= 0, got {baseline_bytes}")
        if tolerance_bytes <= 0:
            raise ValueError(f"tolerance_bytes must be > 0, got {tolerance_bytes}")
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.baseline_bytes = baseline_bytes
        self.tolerance_bytes = tolerance_bytes
        self.window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, t_s: float, used_bytes: int) -> Verdict | None:
        """Take the sample at ``t_s`` seconds (increasing); a Verdict when settled now."""
        if self._samples and t_s <= self._samples[-1][0]:
            raise ValueError(f"samples must come in time order: {t_s} after {self._samples[-1][0]}")
        self._samples.append((t_s, used_bytes))
        start = t_s - self.window_s
        while len(self._samples) >= 2 and self._samples[1][0] <= start:
            self._samples.popleft()
        trend = self.trend()
        if (
            self.baseline_bytes is not None
            and used_bytes <= self.baseline_bytes + self.tolerance_bytes
        ):
            return Verdict("baseline", t_s, used_bytes, trend)
        if trend.covered and trend.spread_bytes < self.tolerance_bytes:
            return Verdict("stable", t_s, used_bytes, trend)
        return None

    def trend(self) -> Trend:
        """The window as it stands after the last sample (at least one must have been added)."""
        (t0, first), (t1, last) = self._samples[0], self._samples[-1]
        values = [used for _, used in self._samples]
        covered = t0 <= t1 - self.window_s
        return Trend(t1 - t0, last - first, max(values) - min(values), covered)


# --- sampling -------------------------------------------------------------------------------
