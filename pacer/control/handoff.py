"""Where a synthesis's time goes between its dispatch and its ready partition, as measured.

pacer times a synthesis from its dispatch to its ready partition (T̂syn). On a host whose
syntheses run in a pool of threads or processes, that time has three parts:

- the trip out: from the dispatch until a synthesis thread takes the partition. Where a thread
  was free at the dispatch, this is the hand-off alone; where none was, it also holds the wait
  in the queue in front of them;
- the synthesis itself, on its thread (``compute``);
- the trip back: from the end of the synthesis until the service hears of it (its event loop).

Only the synthesis itself occupies a process. The two trips are the hand-off: a process that
ends with no partition waiting for it idles for them, however fast it is. Where synthesis
bounds throughput, the queue in front of the processes has to cover them (D200).
"""

from __future__ import annotations

from pacer.control.policy import SynthesisParts


class Handoff:
    """Running means of `SynthesisParts`, weighted towards the last ``samples`` syntheses.

    >>> h = Handoff()
    >>> for _ in range(100):
    ...     h.observe(1.3, SynthesisParts(compute_s=1.0, back_s=0.1, out_s=0.2))
    >>> round(h.process_share or 0, 4), round(h.trip_s, 4)
    (0.7692, 0.3)
    """

    SAMPLES = 64  # the means weigh about this many of the latest syntheses

    def __init__(self) -> None:
        self._seconds = _Mean()
        self._compute = _Mean()
        self._back = _Mean()
        self._out = _Mean()

    def observe(self, seconds: float, parts: SynthesisParts) -> None:
        """Take in one synthesis: ``seconds`` from dispatch to ready, divided as ``parts``.
        Raises ValueError for a negative part, or parts that add up to more than
        ``seconds`` (beyond a millisecond of clock skew)."""
        back, out = parts.back_s or 0.0, parts.out_s or 0.0
        if min(seconds, parts.compute_s, back, out) < 0:
            raise ValueError(f"durations must be at least 0, got {seconds} and {parts}")
        if parts.compute_s + back + out > seconds + 1e-3:
            raise ValueError(f"the parts {parts} add up to more than the whole {seconds} s")
        self._seconds.add(seconds, self.SAMPLES)
        self._compute.add(parts.compute_s, self.SAMPLES)
        if parts.back_s is not None:
            self._back.add(parts.back_s, self.SAMPLES)
        if parts.out_s is not None:
            self._out.add(parts.out_s, self.SAMPLES)

    @property
    def known(self) -> bool:
        """Whether a trip, out or back, was measured."""
        return self._back.count > 0 or self._out.count > 0

    @property
    def process_share(self) -> float | None:
        """The share of a synthesis's time spent on its thread, in (0, 1]; None until
        measured."""
        if self._seconds.count == 0 or self._seconds.value <= 0:
            return None
        return min(1.0, max(self._compute.value / self._seconds.value, 1e-3))

    @property
    def trip_s(self) -> float:
        """The hand-off (s): the trip out where a thread was free, plus the trip back; 0 until
        measured."""
        return self._out.value + self._back.value


class _Mean:
    """A running mean that weighs about the last ``samples`` values alike."""

    def __init__(self) -> None:
        self.value = 0.0
        self.count = 0

    def add(self, value: float, samples: int) -> None:
        self.count += 1
        self.value += (value - self.value) / min(self.count, samples)
