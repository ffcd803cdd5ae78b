"""What a dispatch policy sees and decides: the interface the simulator and the pipeline drive.

The PI controller (``pacer.control.controller``) and the baselines (``pacer.control.baselines``)
implement
``DispatchPolicy``; ``Observation`` is the pipeline at one instant, ``Decision`` the answer.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, NamedTuple, Protocol, overload


class Mode(StrEnum):
    """What the dispatch policy is doing: the ``pacer_controller_mode`` states."""

    BOOTSTRAP = "bootstrap"  # cold start or refill after a drain: filling at once
    PACING = "pacing"  # by the policy's rules (pi: PI on the projected ready depth)
    DRAINED = "drained"  # nothing in flight and nothing to do
    MANUAL = "manual"  # an operator fixed the interval


@dataclass(frozen=True)
class Observation:
    """The pipeline as the dispatcher sees it at one instant (counts of partitions)."""

    ready: int  # synthesized, waiting for a GPU worker
    synthesizing: int  # dispatched, synthesis running
    gpu_busy: int  # on a GPU worker
    gpu_workers: int  # live GPU workers (a worker whose thread died is not counted)
    backlog: int  # accepted, not yet dispatched
    pool_free: int | None = None  # pinned slots free now; None when no pool limits dispatch
    # Partitions of the next one's size that the memory budget admits now (`budget_room`);
    # None: not known, and only the caps bound dispatch.
    budget_free: int | None = None
    # Ages (s) of the oldest syntheses running, oldest first, at most SYNTHESIS_AGES of
    # them; empty when not known.
    synthesis_ages_s: tuple[float, ...] = ()
    # Age (s) of the partition on each busy GPU worker, oldest first (the controller counts
    # the stuck ones by bisection); empty when not known.
    gpu_busy_ages_s: Sequence[float] = ()

    # Enough for the slowdown check to test younger syntheses too: under a heavy tail the
    # oldest few are stragglers, whose chance to finish says little of a change of pace.
    SYNTHESIS_AGES: ClassVar[int] = 64

    @property
    def oldest_synthesis_age_s(self) -> float | None:
        return self.synthesis_ages_s[0] if self.synthesis_ages_s else None

    @property
    def inflight(self) -> int:
        """Partitions holding memory: dispatched and not yet through their GPU work."""
        return self.ready + self.synthesizing + self.gpu_busy


class AgesView(Sequence[float]):
    """Ages at ``now`` of what started at ``starts`` (ascending, so oldest first), each
    computed as it is read: an observation of a thousand busy workers costs nothing to make,
    and the controller reads only a few of them.

    >>> ages = AgesView([1.0, 4.0, 9.0], now=10.0)
    >>> len(ages), ages[0], ages[-1], list(ages)
    (3, 9.0, 1.0, [9.0, 6.0, 1.0])
    """

    __slots__ = ("_now", "_starts")

    def __init__(self, starts: Sequence[float], now: float) -> None:
        self._starts = starts
        self._now = now

    def __len__(self) -> int:
        return len(self._starts)

    @overload
    def __getitem__(self, index: int) -> float: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[float, ...]: ...

    def __getitem__(self, index: int | slice) -> float | tuple[float, ...]:
        if isinstance(index, slice):
            return tuple(self._now - at for at in self._starts[index])
        return self._now - self._starts[index]

    def older_than(self, limit_s: float) -> int:
        """How many are older than ``limit_s``: those that started before now − ``limit_s``,
        by bisection of the starts themselves.

        >>> AgesView([1.0, 4.0, 9.0], now=10.0).older_than(5.0)
        2
        """
        return bisect.bisect_left(self._starts, self._now - limit_s)


def budget_room(free_bytes: int, partition_bytes: int, *, holding: bool) -> int:
    """Partitions of ``partition_bytes`` that the ``free_bytes`` left in the memory budget
    admit now; one while nothing is ``holding`` memory, however large (it runs alone).

    >>> budget_room(1000, 400, holding=True), budget_room(0, 400, holding=False)
    (2, 1)
    """
    room = max(0, free_bytes) // max(1, partition_bytes)
    return room if holding else max(1, room)


class Decision(NamedTuple):
    """Dispatch ``dispatch`` partitions now; ask again at ``next_at`` (clock seconds) at the
    latest, or on the next pipeline event when ``next_at`` is None."""

    dispatch: int
    next_at: float | None


@dataclass(frozen=True)
class Caps:
    """Synthesis-throughput caps, fixed by the host rather than learned.

    ``synthesis_concurrency`` bounds syntheses running at once (cores ÷ threads per synthesis,
    and a configured maximum); ``inflight_partitions`` bounds partitions holding memory
    (budget ÷ partition bytes). ``synthesis_queue``: a partition dispatched beyond
    ``synthesis_concurrency`` waits for a synthesis worker, as in the service's executor, so a
    few may be queued in front of the workers; False where each would start at once and share
    the cores (the simulator's hosts without an executor).
    """

    synthesis_concurrency: int
    inflight_partitions: int
    synthesis_queue: bool = False

    def __post_init__(self) -> None:
        for name in ("synthesis_concurrency", "inflight_partitions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    @classmethod
    def from_host(
        cls,
        *,
        cores: int,
        threads_per_synthesis: int,
        max_concurrent: int | None,
        budget_bytes: int,
        partition_bytes: int,
        synthesis_queue: bool = False,
    ) -> Caps:
        """Caps of a host: ``Caps.from_host(cores=192, threads_per_synthesis=4, ...)``.

        Syntheses at once: what the cores allow (cores ÷ threads per synthesis), and at most
        ``max_concurrent`` where one is set (None: the cores alone decide, so a wide host is
        not held to a fixed number).
        """
        concurrency = cores // threads_per_synthesis
        if max_concurrent is not None:
            concurrency = min(concurrency, max_concurrent)
        return cls(
            synthesis_concurrency=max(1, concurrency),
            inflight_partitions=max(1, budget_bytes // partition_bytes),
            synthesis_queue=synthesis_queue,
        )


class SynthesisParts(NamedTuple):
    """How one synthesis's time (dispatch to ready) divides, in seconds.

    ``compute_s``: on its synthesis thread (or an engine's slot); ``back_s``: from its end
    until the service heard of it (None: not measured, as over the engine protocol);
    ``out_s``: from its dispatch until a thread took it, given only where a thread was free at
    the dispatch (else None: the time holds a wait for a thread as well).
    """

    compute_s: float
    back_s: float | None = None
    out_s: float | None = None


class Terms(NamedTuple):
    """The controller's last computation, for metrics, status and plots."""

    mode: Mode
    projected_ready: float  # Smith-predicted ready depth q̃ = q̂ + ε̄ (partitions)
    setpoint: float  # effective q* (partitions): target_ready_s of GPU work, >= target_ready
    error: float  # e = q* − q̃ (partitions): positive when short
    p_term: float  # kp·e (partitions refilled over a lead time)
    i_term: float  # ki·∫e dt ÷ T̂syn (partitions over a lead time)
    ff_interval_s: float  # feed-forward interval T̂gpu ÷ W (s)
    multiplier: float  # dispatch rate ÷ feed-forward rate
    interval_s: float  # mean interval between dispatches, 1 ÷ dispatch rate (s)
    rate_cap_per_s: float  # synthesis rate cap (partitions/s); inf until T̂syn is known
    lead_s: float = 0.0  # the synthesis lead time the projection looks ahead (s)
    gpu_workers: int = 0  # GPU workers counted as consuming: live, not stuck on a partition
    mismatch: float = 0.0  # ε̄: ready depth observed less predicted a lead earlier, filtered
    hung: int = 0  # syntheses counted as hung: left out of those in synthesis
    floor_s: float = 0.0  # the live floor on the lead time (s); 0 while too few run
    slowdown: float = 1.0  # synthesis this many times slower than T̂syn says (1: none seen)
    held: int = 0  # GPU workers lost whose share of the pipeline is kept (WorkerHold)


class PolicyConflictError(Exception):
    """Something only the PI controller has was asked of a baseline policy (the API answers
    409). ``PolicyConflictError("unpaced", "only the pi policy can be retuned")`` reads
    "controller.policy is unpaced: only the pi policy can be retuned"."""

    def __init__(self, policy: str, rule: str) -> None:
        super().__init__(f"controller.policy is {policy}: {rule}")
        self.policy = policy
        self.rule = rule


class DispatchPolicy(Protocol):
    """What the simulator and the dispatch loop drive: the PI controller or a baseline."""

    @property
    def mode(self) -> Mode: ...

    @property
    def bootstraps(self) -> int: ...

    @property
    def rebootstraps(self) -> int: ...

    @property
    def synthesis_workers(self) -> int | None:
        """Syntheses the policy's own engine runs at once (cuzk's worker pool), the rest of
        what it dispatched waiting for a worker while holding memory; None: no such pool
        (the simulator starts every dispatched partition at once)."""
        ...

    def observe_gpu_service(self, seconds: float) -> None: ...

    def observe_synthesis(self, seconds: float, parts: SynthesisParts | None = None) -> None:
        """A synthesis was ready ``seconds`` after its dispatch; ``parts``: how that time
        divides, where the host measures it (`SynthesisParts`)."""
        ...

    def observe_synthesis_failure(self, elapsed_s: float) -> None:
        """A synthesis failed or timed out ``elapsed_s`` after its dispatch."""
        ...

    def decide(self, obs: Observation) -> Decision: ...

    def interval_s(self) -> float: ...
