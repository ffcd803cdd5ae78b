"""Sets of partition indices held as sorted runs: what the backlog and the journal pass around
instead of a list of every index (a job takes up to a million partitions)."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator

# Runs already taken off the front of an `IndexRanges` are dropped in one move once they are
# at least this many bounds and half of the array: amortised O(1) per pop.
_COMPACT_MIN = 64


class IndexRanges:
    """A set of partition indices (integers ≥ 0) held as sorted, disjoint, non-adjacent
    half-open runs ``[start, stop)``, two 8-byte bounds a run.

    >>> pending = IndexRanges.of(range(1_000_000))
    >>> pending.runs(), len(pending)
    ([(0, 1000000)], 1000000)
    >>> pending.pop_lowest(), pending.pop_lowest()
    (0, 1)
    >>> pending.add(0)  # a retried partition goes back at its place
    >>> pending.runs()
    [(0, 1), (2, 1000000)]
    """

    __slots__ = ("_bounds", "_count", "_head")

    def __init__(self, runs: Iterable[tuple[int, int]] = ()) -> None:
        # start0, stop0, start1, stop1, ...: an index is in the set when an odd number of
        # bounds is ≤ it. Bounds before ``_head`` were popped and not yet dropped.
        self._bounds = array("q")
        self._head = 0
        self._count = 0
        for start, stop in runs:
            self.add(start, stop)

    @classmethod
    def of(cls, indices: Iterable[int]) -> IndexRanges:
        """The indices as runs: a ``range`` of step 1 is one run, an `IndexRanges` is copied,
        anything else is sorted (duplicates count once)."""
        if isinstance(indices, IndexRanges):
            copy = cls()
            copy._bounds = indices._bounds[indices._head :]
            copy._count = indices._count
            return copy
        if isinstance(indices, range) and indices.step == 1:
            return cls([(indices.start, indices.stop)] if indices else [])
        out = cls()
        bounds = out._bounds
        for index in sorted(set(indices)):
            if index < 0:
                raise ValueError(f"partition indices must be ≥ 0, got {index}")
            if bounds and bounds[-1] == index:
                bounds[-1] = index + 1
            else:
                bounds.extend((index, index + 1))
            out._count += 1
        return out

    @classmethod
    def excluding(cls, stop: int, taken: Iterable[int]) -> IndexRanges:
        """The indices of ``range(stop)`` not in ``taken``, which is ascending (as a journal
        reads a job's completed partitions): built run by run, with no list of indices.

        >>> IndexRanges.excluding(10, [0, 3, 4, 9]).runs()
        [(1, 3), (5, 9)]
        """
        out = cls()
        bounds = out._bounds
        last = -1
        for index in taken:
            if index < last or index < 0:
                raise ValueError(f"taken indices must be ascending and ≥ 0, got {index} after "
                                 f"{last}")  # fmt: skip
            if index >= stop:
                break
            if index > last + 1:
                bounds.extend((last + 1, index))
            last = index
        if stop > last + 1:
            bounds.extend((last + 1, stop))
        out._count = sum(bounds[i + 1] - bounds[i] for i in range(0, len(bounds), 2))
        return out

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[int]:
        """The indices, ascending (for a million of them, use `runs`)."""
        for start, stop in self.runs():
            yield from range(start, stop)

    def __contains__(self, index: object) -> bool:
        if not isinstance(index, int):
            return False
        return bisect_right(self._bounds, index, self._head) % 2 == 1

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IndexRanges):
            return NotImplemented
        return self.runs() == other.runs()

    def __repr__(self) -> str:
        return f"IndexRanges({self.runs()!r})"

    def runs(self) -> list[tuple[int, int]]:
        """The runs ``(start, stop)``, ascending."""
        b = self._bounds
        return [(b[i], b[i + 1]) for i in range(self._head, len(b), 2)]

    @property
    def lowest(self) -> int:
        """The lowest index; IndexError when empty."""
        if not self._count:
            raise IndexError("no index in an empty IndexRanges")
        return self._bounds[self._head]

    def pop_lowest(self) -> int:
        """Remove and return the lowest index (O(1) amortised); IndexError when empty."""
        index = self.lowest
        b, head = self._bounds, self._head
        b[head] = index + 1
        if b[head] == b[head + 1]:  # the run is used up
            head += 2
            if head == len(b):
                del b[:]
                head = 0
            elif head >= _COMPACT_MIN and 2 * head >= len(b):
                del b[:head]
                head = 0
        self._head = head
        self._count -= 1
        return index

    def add(self, start: int, stop: int | None = None) -> None:
        """Add the index ``start``, or the run ``[start, stop)``, merging it with the runs it
        overlaps or touches."""
        if stop is None:
            stop = start + 1
        if not 0 <= start <= stop:
            raise ValueError(f"a run needs 0 <= start <= stop, got [{start}, {stop})")
        if start == stop:
            return
        b = self._bounds
        i = bisect_left(b, start, self._head)  # odd: start is inside a run, or ends one
        j = bisect_right(b, stop, self._head)  # odd: stop is inside a run, or starts one
        first, last = i - i % 2, j + j % 2  # the runs that overlap or touch [start, stop)
        covered = sum(max(0, min(b[k + 1], stop) - max(b[k], start)) for k in range(first, last, 2))
        new = array("q")
        if i % 2 == 0:
            new.append(start)
        if j % 2 == 0:
            new.append(stop)
        b[i:j] = new
        self._count += stop - start - covered

    def discard(self, start: int, stop: int) -> int:
        """Remove the indices of ``[start, stop)``; how many of them were in the set.

        >>> pending = IndexRanges([(0, 10)])
        >>> pending.discard(3, 5), pending.discard(0, 4), pending.runs()
        (2, 3, [(5, 10)])
        """
        if not 0 <= start <= stop:
            raise ValueError(f"a run needs 0 <= start <= stop, got [{start}, {stop})")
        b = self._bounds
        i = bisect_left(b, start, self._head)  # odd: a run holds indices before start
        j = bisect_right(b, stop, self._head)  # odd: a run holds indices from stop on
        first, last = i - i % 2, j + j % 2
        covered = sum(max(0, min(b[k + 1], stop) - max(b[k], start)) for k in range(first, last, 2))
        if not covered:
            return 0
        kept = array("q")
        if i % 2:
            kept.append(start)
        if j % 2:
            kept.append(stop)
        b[i:j] = kept
        self._count -= covered
        return covered

    @classmethod
    def without(cls, indices: Iterable[int], taken: Iterable[int]) -> IndexRanges:
        """``indices`` as runs (`of`), less those in ``taken``.

        >>> IndexRanges.without(range(10), [3, 4, 9]).runs()
        [(0, 3), (5, 9)]
        """
        out = cls.of(indices)
        for index in taken:
            out.discard(index, index + 1)
        return out

    def update(self, other: IndexRanges) -> None:
        """Add every index of ``other``."""
        if not self._count:
            copy = IndexRanges.of(other)
            self._bounds, self._head, self._count = copy._bounds, 0, copy._count
            return
        for start, stop in other.runs():
            self.add(start, stop)
