"""Call limits, the retry schedule, what a valid proof is, the daemon pool, and what a failed
synthesis tells the controller: pure logic on a virtual clock, threads where they are the
subject."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
from concurrent.futures import CancelledError
from pathlib import Path
from typing import Any

import pytest

from pacer.config import ControllerSettings, RetrySettings, TimeoutSettings
from pacer.control.controller import PIController
from pacer.control.estimates import Estimates
from pacer.control.policy import Caps, Observation
from pacer.pipeline.attempts import CallLimits, CallTimedOut, RetrySchedule, proof_problem
from pacer.runtime.threads import CallState, DaemonPool
from pacer.workload import Proof
from tests.conftest import FakeClock
from tests.waits import wait_until

ROOT = Path(__file__).resolve().parents[1]


# -- limits ------------------------------------------------------------------------------------


def test_limits_are_the_floors_until_there_are_estimates() -> None:
    limits = CallLimits(TimeoutSettings())
    assert limits.limits() == {"synthesis": 600.0, "prove": 30.0, "verify": 600.0}


def test_derived_limits_follow_the_estimates_and_never_drop_below_the_floors() -> None:
    estimates = Estimates(gpu_service_s=0.13, synthesis_s=1.2)
    settings = TimeoutSettings(prove_floor_s=1.0, synthesis_floor_s=5.0, verify_floor_s=5.0)
    limits = CallLimits(settings, lambda: estimates)
    assert limits.limits() == {"synthesis": 12.0, "prove": 1.3, "verify": 12.0}
    estimates = Estimates(gpu_service_s=0.01, synthesis_s=0.1)  # faster: the floors hold
    assert limits.limits() == {"synthesis": 5.0, "prove": 1.0, "verify": 5.0}


def test_a_configured_limit_is_taken_as_it_is() -> None:
    settings = TimeoutSettings(prove_s=0.5, estimate_multiple=3)
    limits = CallLimits(settings, lambda: Estimates(gpu_service_s=200.0, synthesis_s=300.0))
    assert limits.limit_s("prove") == 0.5  # below the floor and the estimate: as configured
    assert limits.limit_s("synthesis") == 900.0
    assert limits.shortest_s() == 0.5


def test_a_timed_out_call_says_which_and_after_how_long() -> None:
    assert str(CallTimedOut("prove", 300.0, "j", 3)) == "prove timed out after 300 s"
    assert str(CallTimedOut("synthesis", 0.25, "j", 3)) == "synthesis timed out after 0.25 s"


# -- retries -----------------------------------------------------------------------------------


def test_backoff_doubles_from_the_base_up_to_the_cap() -> None:
    schedule = RetrySchedule(RetrySettings(max=8, backoff_s=0.5, backoff_max_s=3.0))
    assert [schedule.delay_s(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert schedule.delay_s(10_000) == 3.0  # no overflow however many


@pytest.mark.parametrize(("max_attempts", "gives_up_after"), [(1, 1), (3, 3)], ids=["1", "3"])
def test_the_job_fails_once_a_partition_has_had_max_attempts(
    max_attempts: int, gives_up_after: int
) -> None:
    schedule = RetrySchedule(RetrySettings(max=max_attempts))
    assert [schedule.gives_up(n) for n in range(1, 4)] == [n >= gives_up_after for n in (1, 2, 3)]


def test_a_delay_before_any_failure_is_refused() -> None:
    with pytest.raises(ValueError, match="failed must be at least 1, got 0"):
        RetrySchedule(RetrySettings()).delay_s(0)


# -- proofs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("proof", "problem"),
    [
        (Proof("ab12", {"ntt": 0.1, "msm": 1}), None),
        (None, "proving returned NoneType, not a Proof"),
        ("ab12", "proving returned str, not a Proof"),
        (Proof("has space"), "proving returned an invalid digest 'has space'"),
        (Proof(""), "proving returned an invalid digest ''"),
        (Proof("tab\there"), "proving returned an invalid digest"),
        (Proof(b"ab12"), "proving returned an invalid digest b'ab12'"),  # type: ignore[arg-type]
        (Proof("ab", {"ntt": math.inf}), "proving returned phase 'ntt' of inf s"),
        (Proof("ab", {"ntt": -1.0}), "proving returned phase 'ntt' of -1.0 s"),
        (Proof("ab", {"ntt": True}), "proving returned phase 'ntt' of True s"),
        (Proof("ab", {3: 1.0}), "proving returned phase 3 of 1.0 s"),  # type: ignore[dict-item]
        (Proof("ab", [1.0]), "proving returned phases [1.0]"),  # type: ignore[arg-type]
    ],
    ids=["good", "none", "str", "space", "empty", "tab", "bytes", "inf", "negative", "bool",
         "name", "list"],
)  # fmt: skip
def test_a_proof_is_checked_before_it_is_journaled(proof: Any, problem: str | None) -> None:
    found = proof_problem(proof)
    assert found == problem if problem is None else (found or "").startswith(problem)


# -- the pool ----------------------------------------------------------------------------------


def test_a_call_that_raises_a_base_exception_leaves_the_thread_serving() -> None:
    class Fatal(BaseException):
        pass

    def fatal() -> None:
        raise Fatal("native binding")

    pool = DaemonPool(1, "test")
    try:
        assert isinstance(pool.submit(fatal).exception(timeout=5), Fatal)
        assert pool.submit(sum, [1, 2]).result(timeout=5) == 3
        assert pool.threads == 1
    finally:
        pool.shutdown()


def test_a_hung_call_is_replaced_and_its_thread_ends_when_it_returns() -> None:
    release = threading.Event()
    pool = DaemonPool(1, "test")
    try:
        hung = pool.submit(release.wait, 30)
        queued = pool.submit(sum, [1, 2])
        # Running once its thread has taken it: replaced then.
        wait_until(lambda: pool.replace(hung), "the hung call to be replaced", timeout_s=5)
        assert queued.result(timeout=5) == 3  # the new thread took the queued call
        assert (pool.threads, pool.abandoned) == (1, 1)
        release.set()
        assert hung.result(timeout=5) is True
        wait_until(lambda: pool.abandoned == 0, "the old thread to end once its call is done",
                   timeout_s=5)  # fmt: skip
        assert not pool.replace(hung)  # nothing runs it any more
    finally:
        release.set()
        pool.shutdown()


def test_shutdown_cancels_what_has_not_started() -> None:
    release = threading.Event()
    pool = DaemonPool(1, "test")
    busy = pool.submit(release.wait, 30)
    waiting = pool.submit(sum, [1])
    pool.shutdown()
    with pytest.raises(CancelledError):
        waiting.result(timeout=5)
    with pytest.raises(RuntimeError, match="the pool is shut down"):
        pool.submit(sum, [1])
    release.set()
    assert busy.result(timeout=5) is True


@pytest.mark.slow
def test_the_interpreter_exits_with_a_call_hung_in_the_pool() -> None:
    # concurrent.futures' pools join their threads at exit: this would never end with one.
    code = (
        "import threading; from pacer.runtime.threads import DaemonPool\n"
        "DaemonPool(1, 'hung').submit(threading.Event().wait)\n"
        "print('exiting', flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=30)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "exiting\n")


def test_a_call_either_finishes_or_is_abandoned() -> None:
    state = CallState()
    assert state.abandon()
    assert not state.finish()  # it returned too late: its result is stale
    assert state.abandoned
    other = CallState()
    assert other.finish()
    assert not other.abandon()


# -- the controller ----------------------------------------------------------------------------


def cold_controller(clock: FakeClock) -> tuple[PIController, Observation]:
    caps = Caps(synthesis_concurrency=8, inflight_partitions=8)
    controller = PIController(ControllerSettings(bootstrap_depth=4), caps, clock)
    obs = Observation(ready=0, synthesizing=0, gpu_busy=0, gpu_workers=1, backlog=100)
    assert controller.decide(obs).dispatch == 4  # the cold cohort
    return controller, obs


def test_a_failed_cold_synthesis_closes_the_cohort_with_the_others_mean(
    clock: FakeClock,
) -> None:
    controller, _ = cold_controller(clock)
    clock.advance(10.0)
    for _ in range(3):
        controller.observe_synthesis(10.0)
    assert controller.lead_s() == pytest.approx(10.0)  # the fourth still counts, by its age
    clock.advance(590.0)
    controller.observe_synthesis_failure(600.0)  # timed out after 600 s
    controller.observe_gpu_service(1.0)
    assert controller.estimates.synthesis_s == pytest.approx(10.0)
    clock.advance(1000.0)
    assert controller.lead_s() == pytest.approx(10.0)  # no member left to age


def test_a_cold_cohort_that_all_failed_bounds_nothing_and_takes_new_members(
    clock: FakeClock,
) -> None:
    controller, obs = cold_controller(clock)
    clock.advance(30.0)
    for _ in range(4):
        controller.observe_synthesis_failure(30.0)
    clock.advance(1000.0)
    assert controller.lead_s() == 0.0  # no failed member keeps ageing
    assert controller.estimates.synthesis_s is None
    assert controller.decide(obs).dispatch == 4  # still cold: dispatches again
    clock.advance(5.0)
    assert controller.lead_s() == pytest.approx(5.0)  # the new members count
