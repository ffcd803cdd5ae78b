"""What travels through the pipeline: `Work`, `Outcome`, `Running` and the `Observer`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from pacer.control.policy import SynthesisParts
from pacer.pipeline.attempts import Call
from pacer.runtime.threads import CallState, DaemonPool
from pacer.workload import PartitionSpec, Proof


@dataclass
class Work:
    """One partition on its way through the pipeline."""

    spec: PartitionSpec
    nbytes: int
    dispatched_at: float = 0.0
    synthesis_began: float | None = None  # when a synthesis worker took it (clock seconds)
    synthesis_ended: float | None = None  # when its synthesis returned, on that worker
    thread_free: bool = False  # a synthesis worker was free at its dispatch
    synthesis_s: float = 0.0  # from dispatch to ready: the wait for a worker and the work
    buffers: Any = None
    verify: bool = False  # chosen at dispatch, so proving can keep what verification reads
    lease: tuple[int, int] | None = None  # what a fleet's gate let it be proved under

    @property
    def synthesis_wait_s(self) -> float:
        """Seconds from dispatch until a synthesis worker took it (0 before it began)."""
        if self.synthesis_began is None:
            return 0.0
        return max(0.0, self.synthesis_began - self.dispatched_at)

    def synthesis_parts(self, now: float) -> SynthesisParts | None:
        """How its synthesis time divides (`SynthesisParts`), heard of at ``now``: on its
        worker, back to the service, and out to the worker where one was free at the
        dispatch; None before its synthesis returned."""
        if self.synthesis_began is None or self.synthesis_ended is None:
            return None
        out = self.synthesis_wait_s if self.thread_free else None
        return SynthesisParts(compute_s=max(0.0, self.synthesis_ended - self.synthesis_began),
                              back_s=max(0.0, now - self.synthesis_ended), out_s=out)  # fmt: skip

    def context(self, gpu: int | None = None) -> dict[str, object]:
        """The log record's context: job, partition and GPU."""
        return {"job": self.spec.job_id, "partition": self.spec.index, "gpu": gpu}


@dataclass(frozen=True)
class Outcome:
    """A partition's attempt that left the pipeline: proved (``proof``) or failed (``error``).

    ``call`` names the call that failed: synthesis, prove or verify. ``synthesis_s`` runs from
    dispatch to ready; ``synthesis_wait_s`` is its part spent waiting for a synthesis worker.
    ``verify_s``: the seconds its proof took to check on the CPU, from a verify thread taking
    it to the pipeline hearing the check ended; None where it was not checked.
    """

    job_id: str
    index: int
    gpu: int | None  # the device it was proved on (the worker, when proving on the CPU)
    synthesis_s: float
    gpu_s: float
    proof: Proof | None = None
    error: str | None = None
    call: Call | None = None
    lease: tuple[int, int] | None = None  # a fleet's lease it was proved under (batch, token)
    synthesis_wait_s: float = 0.0
    verify_s: float | None = None


class Observer(Protocol):
    """What the pipeline reports as it happens (metrics implement it)."""

    def synthesized(self, seconds: float, wait_s: float) -> None:
        """A synthesis is ready ``seconds`` after its dispatch, ``wait_s`` of them spent waiting
        for a synthesis worker."""
        ...

    def proved(self, gpu: int, gpu_s: float, phases_s: dict[str, float]) -> None: ...

    def idle_gap(self, gpu: int, seconds: float) -> None: ...

    def finished(self, outcome: Outcome) -> None: ...

    def hung_call(self, call: Call) -> None:
        """A ``call`` ran past its limit and was abandoned."""
        ...


@dataclass(eq=False)
class Running:
    """A workload call under way, watched against its limit."""

    call: Call
    work: Work
    started: float
    future: Future[Any] | None = None  # on the pool (synthesis, verify); None for prove
    pool: DaemonPool | None = None  # the pool it was submitted to
    outcome: Outcome | None = None  # verify: what proving produced
    state: CallState = field(default_factory=CallState)


def threadsafe(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
    """Call back on the loop from a thread; do nothing once the loop is closed."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)
