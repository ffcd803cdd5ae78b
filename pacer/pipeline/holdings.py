"""Memory that partitions hold against the budget, from dispatch until their buffers go back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pacer.control.policy import budget_room
from pacer.pipeline.work import Work


class Holdings:
    """Partitions holding memory, and their bytes; ``release`` hands buffers back.

    A partition whose call was abandoned leaves ``inflight``, but its bytes stay held as
    ``abandoned_bytes`` until the call returns. `indices` names the partitions in flight;
    ``to_verify`` counts those of them picked for verification.
    """

    def __init__(self, release: Callable[[Any], None]) -> None:
        self._release = release
        self.inflight = 0  # partitions holding memory, but for those of abandoned calls
        self.inflight_bytes = 0  # abandoned calls' partitions included: they hold memory yet
        self.abandoned = 0  # partitions held by abandoned calls that have not returned
        self.abandoned_bytes = 0
        self.to_verify = 0  # partitions in ``inflight`` picked for verification
        self._indices: dict[str, dict[int, int]] = {}  # job → index → times in flight

    def indices(self, job_id: str) -> list[int]:
        """The partitions of ``job_id`` in flight (those of abandoned calls left out)."""
        return list(self._indices.get(job_id, ()))

    def _count(self, work: Work, step: int) -> None:
        spec = work.spec
        held = self._indices.setdefault(spec.job_id, {})
        times = held.get(spec.index, 0) + step
        if times > 0:
            held[spec.index] = times
        else:
            held.pop(spec.index, None)
            if not held:
                del self._indices[spec.job_id]

    def room(self, nbytes: int, budget_bytes: int) -> int:
        """How many partitions of ``nbytes`` fit in ``budget_bytes`` beside what is held.

        One always fits when nothing is held (`budget_room`).
        """
        holding = self.inflight > 0 or self.abandoned > 0
        return budget_room(budget_bytes - self.inflight_bytes, nbytes, holding=holding)

    def take(self, work: Work) -> None:
        """Hold a dispatched partition's bytes."""
        self.inflight += 1
        self.inflight_bytes += work.nbytes
        self.to_verify += work.verify
        self._count(work, 1)

    def release(self, work: Work) -> None:
        """Free a leaving partition's bytes and hand its buffers back."""
        if work.buffers is not None:
            self._release(work.buffers)
        work.buffers = None
        self.inflight -= 1
        self.inflight_bytes -= work.nbytes
        self.to_verify -= work.verify
        self._count(work, -1)

    def abandon(self, work: Work) -> None:
        """Drop an abandoned partition from ``inflight``; its bytes stay held."""
        self.inflight -= 1
        self.to_verify -= work.verify
        self._count(work, -1)
        self.abandoned += 1
        self.abandoned_bytes += work.nbytes

    def returned(self, work: Work, late_buffers: Any) -> None:
        """Free an abandoned call's bytes once it returns, handing back ``late_buffers`` if any."""
        for buffers in (work.buffers, late_buffers):
            if buffers is not None:
                self._release(buffers)
        work.buffers = None
        self.abandoned -= 1
        self.abandoned_bytes -= work.nbytes
        self.inflight_bytes -= work.nbytes
