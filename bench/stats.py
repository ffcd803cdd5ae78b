"""Means with their 95 % intervals, for the benches' tables of repeated runs."""

from __future__ import annotations

import math
import statistics

# Student's t at 97.5 %, by degrees of freedom (runs − 1), to 30; `t95` past the table.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
       9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120,
       17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064,
       25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042}  # fmt: skip
Z975 = 1.959964


def t95(df: int) -> float:
    """Student's t at 97.5 % for ``df`` degrees of freedom: the table to 30, then the
    Cornish-Fisher expansion around the normal quantile (within 0.001 past 30).

    >>> t95(4), round(t95(60), 3), round(t95(10**6), 3)
    (2.776, 2.0, 1.96)
    """
    if df in T95:
        return T95[df]
    z = Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % interval (Student's t; 0 for one value).

    >>> mean, half = interval([1.0, 2.0, 3.0])
    >>> mean, round(half, 3)
    (2.0, 2.484)
    """
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    half = t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, half
