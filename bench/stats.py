"""Means with their 95 % intervals, for the benches' tables of repeated runs."""

from __future__ import annotations

import math
import statistics

# Student's t at 97.5 %, by degrees of freedom (runs − 1); 1.96 past the table.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % interval (Student's t; 0 for one value).

    >>> mean, half = interval([1.0, 2.0, 3.0])
    >>> mean, round(half, 3)
    (2.0, 2.484)
    """
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    half = T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, half
