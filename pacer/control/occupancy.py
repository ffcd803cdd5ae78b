"""How many of the syntheses in flight the synthesis processes are running, on the mean.

pacer times a synthesis from its dispatch to its ready partition, so T̂syn holds any wait in
front of the synthesis processes. Where partitions may queue for a process, the processes'
own time is T̂syn × (processes busy ÷ syntheses in flight), both time averages over the same
stretch (Little's law for the whole stage and for the processes alone, at one throughput).
"""

from __future__ import annotations

import math


class Occupancy:
    """Exponentially weighted time averages of the syntheses in flight N and of the processes
    they keep busy, min(N, processes); their ratio is the share of a synthesis's time spent
    in a process.

    >>> o = Occupancy()
    >>> o.observe(0.0, synthesizing=6, processes=4, tau_s=10.0)
    >>> o.observe(5.0, synthesizing=6, processes=4, tau_s=10.0)
    >>> round(o.busy_share, 4)  # 4 of 6 in a process, 2 waiting
    0.6667
    """

    def __init__(self) -> None:
        self._in_flight = 0.0
        self._busy = 0.0
        self._held: tuple[float, int, int] | None = None  # (since, N, busy) held until now

    @property
    def busy_share(self) -> float:
        """E[min(N, processes)] ÷ E[N], in (0, 1]; 1 until syntheses have been in flight."""
        if self._in_flight <= 0:
            return 1.0
        return min(1.0, max(self._busy / self._in_flight, 1e-3))

    def observe(self, now: float, *, synthesizing: int, processes: int, tau_s: float) -> None:
        """Take in ``synthesizing`` syntheses in flight from ``now`` on, with ``processes``
        to run them; the averages forget over ``tau_s`` seconds (at least 1 ms). Raises
        ValueError for a negative count."""
        if synthesizing < 0 or processes < 0:
            raise ValueError(f"counts must be at least 0, got {synthesizing} and {processes}")
        busy = min(synthesizing, processes)
        if self._held is None:
            self._in_flight, self._busy = float(synthesizing), float(busy)
        else:
            since, held_n, held_busy = self._held
            weight = -math.expm1(-max(0.0, now - since) / max(tau_s, 1e-3))
            self._in_flight += weight * (held_n - self._in_flight)
            self._busy += weight * (held_busy - self._busy)
        self._held = (now, synthesizing, busy)
