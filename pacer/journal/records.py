"""What a journal holds and answers, whatever stores it: job and partition states, the records,
a proved partition to journal (checked when built), the domain errors, and the limits."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

MAX_PARTITIONS = 1_000_000
MAX_PAGE = 1_000
MAX_IDEMPOTENCY_KEY = 128
JobKey = tuple[float, int]
"""Where a job sorts in lists, newest first: (created_at, its row's sequence number)."""


class JobState(StrEnum):
    """Queued → running → completed or failed; queued or running → cancelled."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class PartitionState(StrEnum):
    """A partition without a result is pending."""

    PENDING = "pending"
    COMPLETED = "completed"
    FAILED = "failed"


ACTIVE = (JobState.QUEUED, JobState.RUNNING)
TERMINAL = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)


class UnknownJob(KeyError):  # noqa: N818 - a domain name, like PoolExhausted
    """No job with this id is in the journal."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id

    def __str__(self) -> str:
        return f"unknown job {self.job_id!r}"


class IdempotencyConflict(ValueError):  # noqa: N818 - a domain name, like UnknownJob
    """An idempotency key already names a job that was submitted with a different request."""

    def __init__(self, key: str, job_id: str) -> None:
        super().__init__(
            f"Idempotency-Key {key!r} was used for job {job_id} with a different request; a "
            "key may only repeat the request it was first sent with"
        )
        self.key = key
        self.job_id = job_id


class JournalRefusedError(RuntimeError):
    """This service cannot use the journal as it is (``pacer serve`` exits 2 with the message,
    which says why and what to do about it): a file of a newer schema or in use by another
    service, a database of a newer schema, a host name another pacer of the fleet holds."""


class JournalFileError(JournalRefusedError):
    """The journal file at ``path`` cannot be used as it is; the message says why and what to
    do about it. `NewerSchemaError`, `JournalInUseError` and `JournalFileGoneError` say which."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path


@dataclass(frozen=True)
class JobRecord:
    """A job as journaled. Times are clock seconds; ``result_digest`` is set once completed."""

    id: str
    state: JobState
    partitions: int
    partitions_done: int
    workload: str | None
    params: dict[str, Any]
    priority: int
    created_at: float
    updated_at: float
    error: str | None
    result_digest: str | None


@dataclass(frozen=True)
class Attempt:
    """A failed attempt of partition ``index``: the ``attempt``-th (from 1), why (``reason``),
    on which GPU (None if it failed before proving) and when (``at``, clock seconds)."""

    index: int
    attempt: int
    reason: str
    gpu: int | None
    at: float


@dataclass(frozen=True)
class PartitionRecord:
    """One partition of a job. Durations in seconds; ``gpu`` is the index of the GPU that proved
    it; ``completed_at`` (clock seconds) is when it completed or failed. Pending: all None/empty.
    ``attempts``: its failed attempts, oldest first, whatever its state.
    """

    job_id: str
    index: int
    state: PartitionState
    synthesis_s: float | None = None
    gpu_s: float | None = None
    phases: dict[str, float] = field(default_factory=dict)
    digest: str | None = None
    error: str | None = None
    gpu: int | None = None
    completed_at: float | None = None
    attempts: list[Attempt] = field(default_factory=list)


@dataclass(frozen=True)
class PartitionSummary:
    """How many of a job's partitions are pending (no result yet: waiting, synthesizing or
    proving), completed and failed, and its first failures as (index, error), lowest first."""

    pending: int
    completed: int
    failed: int
    first_failures: list[tuple[int, str]]


def is_int(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_duration(name: str, seconds: float) -> None:
    """``ValueError`` naming ``name`` unless ``seconds`` is a finite number >= 0."""
    number = isinstance(seconds, float) or is_int(seconds)
    if not number or not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {seconds!r}")


class LeaseToken(NamedTuple):
    """A fleet's lease as a result names it: its ``batch`` and the fencing ``token`` it was
    claimed with (`pacer.journal.fleet_backend.Claim`)."""

    batch: int
    token: int


SYNTHESIS_WAIT = "synthesis_wait"  # the phase: seconds a synthesis waited for a worker
VERIFY = "verify"  # the phase: seconds the proof took to check on the CPU, where checked


@dataclass(frozen=True)
class PartitionResult:
    """A proved partition, to journal. ``digest``: the proof's digest (no whitespace); durations
    in seconds; ``phases``: seconds per named phase, the proving phases the workload timed and
    ``SYNTHESIS_WAIT``, the part of ``synthesis_s`` (dispatch to ready) spent waiting for a
    synthesis worker, and ``VERIFY``, the check of the proof on the CPU where it was checked;
    ``gpu``: the index of the GPU used; ``lease``: in a fleet, the lease it was proved under
    (stored only while that is held).
    """

    job_id: str
    index: int
    digest: str
    synthesis_s: float
    gpu_s: float
    phases: dict[str, float] = field(default_factory=dict)
    gpu: int | None = None
    lease: LeaseToken | None = None

    def __post_init__(self) -> None:
        if not is_int(self.index) or self.index < 0:
            raise ValueError(f"index must be an integer >= 0, got {self.index!r}")
        if not isinstance(self.digest, str) or self.digest.split() != [self.digest]:
            raise ValueError(f"digest must be a non-empty string without spaces: {self.digest!r}")
        check_duration("synthesis_s", self.synthesis_s)
        check_duration("gpu_s", self.gpu_s)
        for phase, seconds in self.phases.items():
            check_duration(f"phases[{phase!r}]", seconds)
        if self.gpu is not None and (not is_int(self.gpu) or self.gpu < 0):
            raise ValueError(f"gpu must be a GPU index >= 0 or None, got {self.gpu!r}")


def result_digest(digests: Iterable[str]) -> str:
    """SHA-256 (hex) of the partition digests in index order, one per line: the same as
    ``printf '%s\\n' d0 d1 ... | sha256sum``.
    """
    h = hashlib.sha256()
    for digest in digests:
        h.update(digest.encode() + b"\n")
    return h.hexdigest()
