"""The memory partitions hold against the budget, counted from dispatch until their buffers go
back to the workload."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pacer.control.policy import budget_room
from pacer.pipeline.work import Work


class Holdings:
    """Partitions holding memory, and their bytes (``release`` hands buffers back).

    A partition whose call was abandoned leaves the pipeline (it is no longer ``inflight``),
    but its bytes stay held, as ``abandoned_bytes``, until the call really returns.
    """

    def __init__(self, release: Callable[[Any], None]) -> None:
        self._release = release
        self.inflight = 0  # partitions holding memory, but for those of abandoned calls
        self.inflight_bytes = 0  # abandoned calls' partitions included: they hold memory yet
        self.abandoned = 0  # partitions held by abandoned calls that have not returned
        self.abandoned_bytes = 0

    def room(self, nbytes: int, budget_bytes: int) -> int:
        """Partitions of ``nbytes`` that stay within ``budget_bytes`` with what is held
        (`budget_room`: one when nothing is held, however large)."""
        holding = self.inflight > 0 or self.abandoned > 0
        return budget_room(budget_bytes - self.inflight_bytes, nbytes, holding=holding)

    def take(self, work: Work) -> None:
        """A partition is dispatched: its bytes are held from now."""
        self.inflight += 1
        self.inflight_bytes += work.nbytes

    def release(self, work: Work) -> None:
        """A partition leaves the pipeline: its buffers go back, its bytes are free."""
        if work.buffers is not None:
            self._release(work.buffers)
        work.buffers = None
        self.inflight -= 1
        self.inflight_bytes -= work.nbytes

    def abandon(self, work: Work) -> None:
        """A partition's call was abandoned: it leaves, its bytes stay held."""
        self.inflight -= 1
        self.abandoned += 1
        self.abandoned_bytes += work.nbytes

    def returned(self, work: Work, late_buffers: Any) -> None:
        """An abandoned call returned (with ``late_buffers``, a synthesis's result): the
        partition's buffers go back and its bytes are free."""
        for buffers in (work.buffers, late_buffers):
            if buffers is not None:
                self._release(buffers)
        work.buffers = None
        self.abandoned -= 1
        self.abandoned_bytes -= work.nbytes
        self.inflight_bytes -= work.nbytes
