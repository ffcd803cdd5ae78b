"""The journal's health state, the backoff of its retries and the calls running on its threads,
on a clock the test moves."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from pacer.journal.health import Backoff, JournalCalls, JournalHealth
from tests.conftest import FakeClock


def test_backoff_doubles_to_its_cap_and_jitter_only_shortens() -> None:
    backoff = Backoff(first_s=0.05, max_s=5.0, jitter=0.5)
    assert [backoff.delay_s(n, draw=lambda: 0.0) for n in (1, 2, 3, 8, 1000)] == [
        0.05, 0.1, 0.2, 5.0, 5.0
    ]  # fmt: skip
    assert backoff.delay_s(8, draw=lambda: 0.999) == pytest.approx(2.5, rel=1e-3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"first_s": 0.0}, "first_s must be > 0 and at most max_s"),
        ({"first_s": 10.0, "max_s": 5.0}, "first_s must be > 0 and at most max_s (5.0), got 10"),
        ({"jitter": 1.0}, "jitter must be from 0 to below 1, got 1.0"),
        ({"jitter": -0.1}, "jitter must be from 0 to below 1"),
    ],
    ids=["zero-first", "first-over-max", "jitter-one", "jitter-negative"],
)
def test_backoff_refuses_what_cannot_pace_retries(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Backoff(**kwargs)


def test_backoff_counts_failures_from_one() -> None:
    with pytest.raises(ValueError, match="failures must be >= 1, got 0"):
        Backoff().delay_s(0)


def test_a_failing_spell_is_logged_at_its_start_on_a_new_error_then_once_a_minute(
    clock: FakeClock,
) -> None:
    health = JournalHealth(clock, log_every_s=60.0)
    logged = []
    for t, error in [(0, "locked"), (1, "locked"), (30, "locked"), (31, "disk full"),
                     (32, "disk full"), (91, "disk full"), (92, "disk full")]:  # fmt: skip
        clock.now = t
        logged.append(health.failed(error))
    assert logged == [True, False, False, True, False, True, False]
    assert (health.failures, health.failures_in_spell) == (7, 7)
    assert health.failing_s() == 92
    assert health.reason() == "journal failing for 92 s: disk full"
    clock.now = 100.0
    assert health.succeeded() == 100.0
    assert (health.healthy, health.reason(), health.failing_s()) == (True, None, 0.0)
    assert health.succeeded() is None  # already healthy
    clock.now = 101.0
    assert health.failed("disk full")  # a new spell logs at once, even with the same error
    assert (health.failures, health.failures_in_spell) == (8, 1)


def test_each_journal_thread_has_its_running_call_and_each_stall_is_handed_out_once(
    clock: FakeClock,
) -> None:
    calls = JournalCalls(clock, stall_s=10.0)
    with ThreadPoolExecutor(1, "pacer-claims") as claims:
        calls.began("complete_partitions")
        clock.advance(8.0)
        claims.submit(calls.began, "claim").result()
        clock.advance(3.0)
        assert [(c.name, c.thread, s) for c, s in calls.running()] == [
            ("complete_partitions", "MainThread", 11.0), ("claim", "pacer-claims_0", 3.0)
        ]  # fmt: skip
        assert calls.longest_s() == 11.0
        assert [c.name for c, _ in calls.stalled()] == ["complete_partitions"]
        clock.advance(7.0)
        assert [c.name for c, _ in calls.stalled()] == ["claim"]  # the first: handed out
        assert calls.reasons() == [
            "journal call complete_partitions running for 18 s (more than 10 s)",
            "journal call claim running for 10 s (more than 10 s)",
        ]
        assert claims.submit(calls.ended).result() == (10.0, True)
    calls.began("add_job")  # the thread's next call starts afresh
    clock.advance(12.0)
    assert calls.ended() == (12.0, False)  # past the limit, never handed out
    calls.began("counts")
    assert calls.ended() is None  # within the limit
    assert (calls.running(), calls.longest_s(), calls.ended()) == ([], 0.0, None)


def test_journal_calls_need_a_positive_limit(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="stall_s must be greater than 0, got 0"):
        JournalCalls(clock, stall_s=0.0)
