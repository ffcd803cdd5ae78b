"""The backlog: partitions of accepted jobs waiting for dispatch, in dispatch order.

The order is higher priority, then lower order (arrival), then lower index. Each job's pending
partitions are an `IndexRanges` of sorted runs, so a job of a million partitions is one run.
The jobs are a heap; taking the next partition is O(1) amortised (docs/decisions/pipeline.md,
D45).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pacer.ranges import IndexRanges
from pacer.workload import PartitionSpec


@dataclass(eq=False)
class QueuedJob:
    """A job with partitions in the backlog: what dispatch needs of it, and its pending ones."""

    job_id: str
    seed: int
    params: dict[str, Any]
    pending: IndexRanges
    key: tuple[int, int, str]  # (-priority, order, job_id): its place in the heap


class Backlog:
    """Partitions waiting for dispatch, across jobs: `peek` at the next job, `pop` its partition.

    A job costs one heap entry and its runs, whatever its size.

    >>> backlog = Backlog()
    >>> backlog.add("old", 1, {}, range(3), order=1)
    3
    >>> backlog.add("urgent", 2, {}, [4, 2], priority=5, order=2)
    2
    >>> [(s.job_id, s.index) for s in iter(backlog.pop, None)]
    [('urgent', 2), ('urgent', 4), ('old', 0), ('old', 1), ('old', 2)]
    """

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, str]] = []
        self._jobs: dict[str, QueuedJob] = {}
        self._count = 0

    def __len__(self) -> int:
        """Partitions waiting, all jobs together."""
        return self._count

    def add(
        self, job_id: str, seed: int, params: dict[str, Any], indices: Iterable[int],
        *, priority: int = 0, order: int = 0,
    ) -> int:  # fmt: skip
        """Queue partitions of a job; return how many were not queued already.

        Higher ``priority`` goes first, then lower ``order``, then lower index. ``indices`` may be a
        ``range``, an `IndexRanges` or any iterable. A job already queued keeps its place.
        """
        runs = IndexRanges.of(indices)
        queued = self._jobs.get(job_id)
        if queued is None:
            if not runs:
                return 0
            key = (-priority, order, job_id)
            self._jobs[job_id] = QueuedJob(job_id, seed, params, runs, key)
            heapq.heappush(self._heap, key)
            added = len(runs)
        else:
            before = len(queued.pending)
            queued.pending.update(runs)
            added = len(queued.pending) - before
        self._count += added
        return added

    def cancel(self, job_id: str) -> int:
        """Drop a job's partitions; return how many were dropped."""
        queued = self._jobs.pop(job_id, None)
        dropped = 0 if queued is None else len(queued.pending)
        self._count -= dropped
        return dropped

    def discard(self, job_id: str, indices: IndexRanges) -> int:
        """Drop those of ``indices`` waiting in the job's backlog; return how many."""
        queued = self._jobs.get(job_id)
        if queued is None:
            return 0
        dropped = sum(queued.pending.discard(start, stop) for start, stop in indices.runs())
        if not queued.pending:
            del self._jobs[job_id]  # its heap entry goes when peek meets it
        self._count -= dropped
        return dropped

    def pending(self, job_id: str) -> IndexRanges | None:
        """The job's partitions waiting (not a copy), or None when it has none."""
        queued = self._jobs.get(job_id)
        return None if queued is None else queued.pending

    def peek(self) -> QueuedJob | None:
        """The job whose partition `pop` takes next, or None when the backlog is empty."""
        heap = self._heap
        while heap:
            queued = self._jobs.get(heap[0][2])
            if queued is not None and queued.key == heap[0]:
                return queued
            heapq.heappop(heap)  # cancelled (or emptied and queued again under another key)
        return None

    def pop(self) -> PartitionSpec | None:
        """Take the next partition, or None when the backlog is empty."""
        queued = self.peek()
        if queued is None:
            return None
        index = queued.pending.pop_lowest()
        if not queued.pending:
            heapq.heappop(self._heap)
            del self._jobs[queued.job_id]
        self._count -= 1
        return PartitionSpec(queued.job_id, index, queued.seed, queued.params)
