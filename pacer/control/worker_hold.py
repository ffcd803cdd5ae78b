"""The pipeline of GPU workers just lost, kept for a while in case they come back.

A GPU worker that stops delivering (its thread gone, or stuck on one partition) often returns:
a driver reset, a restarted engine, a stall that ends. Shrinking the pipeline at once to what
the live workers need gives back memory, but a worker that returns then waits a whole lead time
for the refill. ``WorkerHold`` keeps the lost workers' share of the pipeline for
``lost_gpu_hold_leads`` lead times from the loss: the controller's setpoint rises by the depth
their share of the pipeline held, so that in flight stays where it was while the live workers
consume less, and the partitions that pile up wait ready. The hold ends when the workers are
back or its time is up; then the setpoint is the live workers' again. D191 has why.
"""

from __future__ import annotations

import math


class WorkerHold:
    """How many lost GPU workers' pipelines to keep, by time.

    >>> hold = WorkerHold()
    >>> hold.update(0.0, before=4, workers=4, hold_s=60.0)  # nothing lost
    0
    >>> hold.update(1.0, before=4, workers=2, hold_s=60.0)  # two lost: kept for 60 s
    2
    >>> hold.update(30.0, before=2, workers=2, hold_s=60.0)
    2
    >>> hold.update(61.5, before=2, workers=2, hold_s=60.0)  # time is up
    0
    >>> hold.update(70.0, before=2, workers=1, hold_s=60.0), hold.update(71.0, 1, 2, 60.0)
    (1, 0)
    """

    def __init__(self) -> None:
        self._peak = 0  # the workers delivering before the loss
        self._until = -math.inf  # when the hold ends (s, the controller's clock)

    def update(self, now: float, before: int, workers: int, hold_s: float) -> int:
        """``workers`` deliver now, ``before`` did at the last decision; a hold starts where
        fewer do, unless one runs already, and lasts ``hold_s`` (s). Returns the workers
        whose pipeline is kept: those lost, until they are back or the hold is over."""
        if workers < before and now >= self._until and hold_s > 0:
            self._peak, self._until = before, now + hold_s
        if workers >= self._peak or now >= self._until:
            self._peak, self._until = workers, -math.inf
            return 0
        return self._peak - workers
