from __future__ import annotations

import pytest

from pacer.service.admission import (
    DEFAULT_RETRY_AFTER_S,
    MAX_RETRY_AFTER_S,
    Admission,
    BacklogFullError,
    retry_after_s,
)


def test_a_reservation_holds_room_until_its_block_ends() -> None:
    admission = Admission(max_backlog=10)
    with admission.reserve(backlog=2, partitions=6, rate_per_s=None):
        with pytest.raises(BacklogFullError) as info, admission.reserve(2, 3, None):
            pass
        assert (info.value.waiting, info.value.partitions, info.value.limit) == (8, 3, 10)
        with admission.reserve(backlog=2, partitions=2, rate_per_s=None):
            assert admission.reserved == 8
    assert admission.reserved == 0


def test_a_failed_block_gives_its_room_back() -> None:
    admission = Admission(max_backlog=10)
    with pytest.raises(RuntimeError), admission.reserve(0, 10, None):
        raise RuntimeError("journal down")
    with admission.reserve(0, 10, None):
        pass


@pytest.mark.parametrize(
    ("excess", "rate", "expected"),
    [
        (100, 4.0, 25),
        (1, 1000.0, 1),
        (10**9, 0.001, MAX_RETRY_AFTER_S),
        (5, None, DEFAULT_RETRY_AFTER_S),
        (5, 0.0, DEFAULT_RETRY_AFTER_S),
        (5, float("inf"), DEFAULT_RETRY_AFTER_S),
        (5, float("nan"), DEFAULT_RETRY_AFTER_S),
    ],
    ids=["rate", "at-least-one", "at-most-an-hour", "unknown", "zero", "inf", "nan"],
)
def test_retry_after_is_the_time_to_make_room(
    excess: int, rate: float | None, expected: int
) -> None:
    assert retry_after_s(excess, rate) == expected


def test_the_message_says_what_is_full_and_when_to_retry() -> None:
    message = (r"backlog full: 9 partitions wait for dispatch and 2 more would exceed "
               r"PACER_API__MAX_BACKLOG \(10\); retry in 1 s")  # fmt: skip
    with pytest.raises(BacklogFullError, match=message), Admission(10).reserve(9, 2, 1000.0):
        pass
