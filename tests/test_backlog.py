"""The backlog and its runs of partition indices: order, retries, cancel, and memory that does
not grow with a job's size; checked against plain Python sets and a sort."""

from __future__ import annotations

import itertools
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pacer.pipeline.backlog import Backlog
from pacer.ranges import IndexRanges

MILLION = 1_000_000


def allocated_by(action: Callable[[], Any]) -> tuple[Any, int]:
    """What ``action`` returns, and the bytes it left allocated (tracemalloc)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = action()
        return result, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def canonical(ranges: IndexRanges) -> bool:
    """Runs sorted, non-empty, neither overlapping nor touching."""
    runs = ranges.runs()
    return all(start < stop for start, stop in runs) and all(
        a[1] < b[0] for a, b in itertools.pairwise(runs)
    )


# -- IndexRanges --------------------------------------------------------------------------


def test_a_million_indices_are_one_run_of_a_few_bytes() -> None:
    ranges, allocated = allocated_by(lambda: IndexRanges.of(range(MILLION)))
    assert ranges.runs() == [(0, MILLION)]
    assert len(ranges) == MILLION
    assert allocated < 1024


@pytest.mark.parametrize(
    ("indices", "runs"),
    [
        ([], []),
        ([3], [(3, 4)]),
        ([5, 1, 2, 2, 3, 9], [(1, 4), (5, 6), (9, 10)]),
        (range(4, 9), [(4, 9)]),
        (range(0, 10, 3), [(0, 1), (3, 4), (6, 7), (9, 10)]),
        (IndexRanges([(2, 4), (7, 8)]), [(2, 4), (7, 8)]),
    ],
    ids=["empty", "one", "unsorted-duplicates", "range", "stepped-range", "copy"],
)
def test_of_makes_runs(indices: Any, runs: list[tuple[int, int]]) -> None:
    assert IndexRanges.of(indices).runs() == runs


def test_of_copies_an_index_ranges() -> None:
    original = IndexRanges([(0, 3)])
    copy = IndexRanges.of(original)
    copy.pop_lowest()
    assert original.runs() == [(0, 3)]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: IndexRanges.of([2, -1]), "partition indices must be ≥ 0, got -1"),
        (lambda: IndexRanges([(5, 3)]), "a run needs 0 <= start <= stop, got [5, 3)"),
        (lambda: IndexRanges.excluding(9, [4, 2]), "ascending and ≥ 0, got 2 after 4"),
        (lambda: IndexRanges().pop_lowest(), "no index in an empty IndexRanges"),
    ],
    ids=["negative", "backwards-run", "unsorted-taken", "pop-empty"],
)
def test_bad_input_is_refused_with_the_rule(call: Callable[[], Any], message: str) -> None:
    with pytest.raises((ValueError, IndexError)) as raised:
        call()
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("stop", "taken", "runs"),
    [
        (5, [], [(0, 5)]),
        (5, [0, 1, 2, 3, 4], []),
        (10, [0, 3, 4, 9], [(1, 3), (5, 9)]),
        (4, [1, 1, 7], [(0, 1), (2, 4)]),
    ],
    ids=["none-taken", "all-taken", "gaps", "duplicate-and-beyond"],
)
def test_excluding_gives_the_runs_between_taken_indices(
    stop: int, taken: list[int], runs: list[tuple[int, int]]
) -> None:
    assert IndexRanges.excluding(stop, iter(taken)).runs() == runs


def test_popping_many_runs_drops_the_used_ones_and_keeps_the_order() -> None:
    ranges = IndexRanges((i, i + 1) for i in range(0, 2000, 2))
    popped = [ranges.pop_lowest() for _ in range(700)]
    ranges.add(1)  # below everything left: goes first
    ranges.add(1999)  # joins the last run
    assert popped == list(range(0, 1400, 2))
    assert [ranges.pop_lowest() for _ in range(3)] == [1, 1400, 1402]
    assert ranges.runs()[-1] == (1998, 2000)
    assert len(ranges) == 300 - 2 + 1
    assert len(ranges._bounds) - ranges._head < 2 * 300  # what was popped is gone


operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 200), st.integers(0, 40)),
        st.tuples(st.just("one"), st.integers(0, 200), st.just(0)),
        st.tuples(st.just("pop"), st.just(0), st.just(0)),
        st.tuples(st.just("discard"), st.integers(0, 200), st.integers(0, 60)),
    ),
    max_size=150,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_index_ranges_behave_as_a_sorted_set(ops: list[tuple[str, int, int]]) -> None:
    ranges, model = IndexRanges(), set[int]()
    for op, start, length in ops:
        if op == "add":
            ranges.add(start, start + length)
            model.update(range(start, start + length))
        elif op == "one":
            ranges.add(start)
            model.add(start)
        elif op == "discard":
            gone = model & set(range(start, start + length))
            assert ranges.discard(start, start + length) == len(gone)
            model -= gone
        elif model:
            lowest = min(model)
            model.remove(lowest)
            assert ranges.pop_lowest() == lowest
        assert len(ranges) == len(model)
        assert canonical(ranges)
    assert list(ranges) == sorted(model)
    assert all(i in ranges for i in model)
    assert ranges == IndexRanges.of(model)


# -- Backlog ------------------------------------------------------------------------------


def test_a_job_of_a_million_partitions_holds_one_run_in_the_backlog() -> None:
    backlog = Backlog()
    added, allocated = allocated_by(lambda: backlog.add("big", 7, {}, range(MILLION)))
    assert added == MILLION == len(backlog)
    pending = backlog.pending("big")
    assert pending is not None
    assert pending.runs() == [(0, MILLION)]
    assert allocated < 100 * 1024
    spec = backlog.pop()
    assert spec is not None
    assert (spec.job_id, spec.index, spec.seed) == ("big", 0, 7)


def test_a_resumed_job_keeps_its_runs_and_a_retry_joins_them_at_its_place() -> None:
    backlog = Backlog()
    backlog.add("j", 1, {}, IndexRanges([(2, 5), (6, 10)]))
    first = [backlog.pop() for _ in range(2)]
    backlog.add("j", 1, {}, [2])  # its attempt failed: tried again before 4
    rest = [backlog.pop() for _ in range(8)]
    assert [s.index for s in first + rest if s is not None] == [2, 3, 2, 4, 6, 7, 8, 9]
    assert backlog.pop() is None
    assert len(backlog) == 0


def test_a_cancelled_job_queued_again_takes_its_new_place() -> None:
    backlog = Backlog()
    backlog.add("a", 1, {}, [0, 1], priority=5, order=1)
    backlog.add("b", 1, {}, [0], priority=2, order=2)
    assert backlog.cancel("a") == 2
    backlog.add("a", 1, {}, [0], priority=0, order=3)
    assert [(s.job_id, s.index) for s in iter(backlog.pop, None)] == [("b", 0), ("a", 0)]


Job = st.sampled_from(["a", "b", "c", "d"])
backlog_operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"),
            Job,
            st.one_of(
                st.lists(st.integers(0, 60), max_size=8),
                st.builds(range, st.integers(0, 30), st.integers(0, 90)),
            ),
            st.integers(0, 2),
            st.integers(0, 3),
        ),
        st.tuples(st.just("retry"), Job, st.integers(0, 60), st.just(0), st.just(0)),
        st.tuples(st.just("cancel"), Job, st.just(0), st.just(0), st.just(0)),
        st.tuples(st.just("pop"), Job, st.integers(1, 20), st.just(0), st.just(0)),
        st.tuples(st.just("discard"), Job, st.integers(0, 60), st.integers(0, 30), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(backlog_operations)
def test_dispatch_order_is_priority_then_order_then_index(ops: list[tuple[Any, ...]]) -> None:
    """Against a model: each job keeps the place it was queued at until it has no partition
    left (then it is queued anew); the next partition is the lowest index of the job with the
    highest priority, then the lowest order (then name)."""
    backlog = Backlog()
    model: dict[str, tuple[tuple[int, int, str], set[int]]] = {}
    for op, job, arg, priority, order in ops:
        if op in ("add", "retry"):
            indices = [arg] if op == "retry" else arg
            added = backlog.add(job, 1, {}, indices, priority=priority, order=order)
            key, pending = model.get(job, ((-priority, order, job), set()))
            before = len(pending)
            pending = pending | set(indices)
            if pending:
                model[job] = (key, pending)
            assert added == len(pending) - before
        elif op == "cancel":
            gone = model.pop(job, (None, set()))[1]
            assert backlog.cancel(job) == len(gone)
        elif op == "discard":  # a lease lost: those of its partitions still waiting leave
            key, pending = model.get(job, ((0, 0, job), set()))
            gone = pending & set(range(arg, arg + priority))
            assert backlog.discard(job, IndexRanges([(arg, arg + priority)])) == len(gone)
            if pending - gone:
                model[job] = (key, pending - gone)
            else:
                model.pop(job, None)
        else:
            for _ in range(arg):
                spec = backlog.pop()
                if not model:
                    assert spec is None
                    break
                key, pending = min(model.values(), key=lambda entry: entry[0])
                index = min(pending)
                pending.remove(index)
                if not pending:
                    del model[key[2]]
                assert spec is not None
                assert (spec.job_id, spec.index) == (key[2], index)
        assert len(backlog) == sum(len(pending) for _, pending in model.values())
    for job, (_, pending) in model.items():
        assert list(backlog.pending(job) or []) == sorted(pending)
