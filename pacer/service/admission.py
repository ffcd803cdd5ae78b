"""Admission control: a bound on the partitions waiting for dispatch.

Every waiting partition costs service memory (the backlog holds its index) and every accepted
job a journal row; intake without a bound lets one client exhaust both. A job that would take
the backlog past ``max_backlog`` is refused (the API answers 429) with the seconds after which
a retry may succeed, estimated from the rate partitions leave the backlog.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

DEFAULT_RETRY_AFTER_S = 30  # while no proving rate is known
MAX_RETRY_AFTER_S = 3600


class BacklogFullError(Exception):
    """A job would take the backlog past its bound; ``retry_after_s`` says when to try again."""

    def __init__(self, waiting: int, partitions: int, limit: int, retry_after_s: int) -> None:
        super().__init__(
            f"backlog full: {waiting} partitions wait for dispatch and {partitions} more would "
            f"exceed PACER_API__MAX_BACKLOG ({limit}); retry in {retry_after_s} s"
        )
        self.waiting = waiting
        self.partitions = partitions
        self.limit = limit
        self.retry_after_s = retry_after_s


def retry_after_s(excess: int, rate_per_s: float | None) -> int:
    """Seconds until ``excess`` partitions have left the backlog at ``rate_per_s``, from 1 to
    MAX_RETRY_AFTER_S; DEFAULT_RETRY_AFTER_S while the rate is unknown.

    >>> retry_after_s(100, 4.0), retry_after_s(100, None)
    (25, 30)
    """
    if rate_per_s is None or not (math.isfinite(rate_per_s) and rate_per_s > 0):
        return DEFAULT_RETRY_AFTER_S
    return max(1, min(MAX_RETRY_AFTER_S, math.ceil(excess / rate_per_s)))


class Admission:
    """Admits jobs while the backlog stays within ``max_backlog`` partitions.

    A job is reserved from its admission until it is in the backlog (``reserve``), so two
    submissions journaling at once cannot both take the last room.
    """

    def __init__(self, max_backlog: int) -> None:
        if max_backlog < 1:
            raise ValueError(f"max_backlog must be at least 1, got {max_backlog}")
        self.max_backlog = max_backlog
        self.reserved = 0

    @contextmanager
    def reserve(self, backlog: int, partitions: int, rate_per_s: float | None) -> Iterator[None]:
        """Hold room for ``partitions`` on top of ``backlog`` (partitions waiting now) while
        the block runs; BacklogFullError if there is none. ``rate_per_s``: partitions leaving
        the backlog per second, None if unknown (for Retry-After)."""
        waiting = backlog + self.reserved
        if waiting + partitions > self.max_backlog:
            excess = waiting + partitions - self.max_backlog
            raise BacklogFullError(
                waiting, partitions, self.max_backlog, retry_after_s(excess, rate_per_s)
            )
        self.reserved += partitions
        try:
            yield
        finally:
            self.reserved -= partitions
