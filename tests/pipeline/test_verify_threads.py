"""Verification on threads of its own: it never takes a synthesis thread, and where it falls
behind, the pick passes to a later partition instead of holding memory (D201). On virtual
time; the workload's calls run on the pipeline's real threads."""

from __future__ import annotations

import math
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from pacer.config import ControllerSettings, TimeoutSettings
from pacer.control.controller import PIController
from pacer.control.estimates import Estimates
from pacer.control.policy import Caps
from pacer.pipeline import Outcome, Pipeline
from pacer.pipeline.attempts import CallLimits
from pacer.workload import PartitionSpec, Proof
from tests.conftest import FakeClock
from tests.pipeline.test_pipeline import Recording, Run
from tests.pipeline.virtual_time import HORIZON_S, LOOPS, VirtualTimers
from tests.waits import until

pytestmark = pytest.mark.asyncio


class HeldVerification(Recording):
    """Verification waits until the test lets it go; synthesis notes what is held for it."""

    def __init__(self, hold: set[int] | None = None) -> None:
        super().__init__()
        self.go = threading.Event()
        self.held = threading.Event()  # a verification waits for the go
        self.hold = hold  # the partitions whose verification waits; None: every one
        self.to_verify_seen: list[int] = []
        self.synthesized_while_held = 0

    def synthesize(self, spec: PartitionSpec) -> Any:
        if self.pipeline is not None:
            self.to_verify_seen.append(self.pipeline.holdings.to_verify)
        if self.held.is_set() and not self.go.is_set():
            self.synthesized_while_held += 1
        return super().synthesize(spec)

    def verify(self, spec: PartitionSpec, buffers: Any, proof: Proof) -> bool:
        if self.hold is None or spec.index in self.hold:
            self.held.set()
            assert self.go.wait(30), "the test never let verification go"
        return super().verify(spec, buffers, proof)


def build(
    workload: Recording, synth: int, verify_every: int, verify_threads: int, **limits: float
) -> Run:
    clock = FakeClock()
    timers = VirtualTimers(clock)
    outcomes: list[Outcome] = []
    caps = Caps(synthesis_concurrency=synth, inflight_partitions=100)
    controller = PIController(ControllerSettings(), caps, clock, Estimates(0.01, 0.01))
    pipeline = Pipeline(controller, workload, caps, workers=1, budget_bytes=10_000,
                        on_outcome=outcomes.append, verify_every=verify_every,
                        verify_threads=verify_threads, limits=CallLimits(TimeoutSettings(**limits)),
                        clock=clock, timers=timers)  # fmt: skip
    workload.pipeline = pipeline
    return Run(pipeline, clock, timers, outcomes)


async def drive(run: Run, done: Callable[[], object], what: str) -> None:
    """Run the started pipeline on virtual time until ``done()``, while a verification may be
    held: let what else is in flight finish, then move the clock to the next deadline."""
    p = run.pipeline
    horizon = run.clock() + HORIZON_S

    def settled() -> bool:
        quiet = p.synthesizing == 0 and p.gpu_busy == 0 and p.ready == 0
        return bool(done()) or (quiet and run.timers.parked == LOOPS)

    while True:
        await until(settled, f"{what}, or nothing but the clock to wait on")
        if done():
            return
        if not run.timers.jump() or run.clock() > horizon:
            raise AssertionError(f"the pipeline waits on nothing the clock can bring: {what}")


async def one_synthesis_thread_while_2_verifies(
    verify_threads: int,
    meanwhile: Callable[[Run, HeldVerification], Awaitable[None]],
    *,
    shared: bool = False,
) -> tuple[Run, HeldVerification]:
    """100 partitions on one synthesis thread, every third verified (on the synthesis thread
    where ``shared``): while partition 2's verification holds its thread, ``meanwhile`` runs;
    then it is let go and every one ends."""
    workload = HeldVerification(hold={2})
    run = build(workload, synth=1, verify_every=3, verify_threads=verify_threads)
    run.pipeline.calls.share_verification(shared)
    run.pipeline.enqueue("j", 1, {}, list(range(100)))
    run.pipeline.start()
    try:
        await drive(run, workload.held.is_set, "the verification of partition 2 on a thread")
        await meanwhile(run, workload)
        workload.go.set()
        await drive(run, lambda: len(run.outcomes) >= 100, "every partition")
    finally:
        workload.go.set()
        await run.pipeline.close()
    assert all(o.error is None for o in run.outcomes)
    return run, workload


async def test_a_verification_on_its_own_thread_leaves_the_synthesis_thread_free() -> None:
    async def meanwhile(run: Run, workload: HeldVerification) -> None:
        # The one synthesis thread goes on with the rest while 2 holds the verify thread.
        await drive(run, lambda: workload.synthesized_while_held >= 10, "syntheses meanwhile")
        assert 2 not in {o.index for o in run.outcomes}

    run, workload = await one_synthesis_thread_while_2_verifies(1, meanwhile)
    assert 2 in workload.verified
    assert run.pipeline.verifications_skipped > 0  # dues that came while 2 held the thread


async def a_synthesis_waits(run: Run, workload: HeldVerification) -> None:
    """Later partitions are dispatched, and wait: the one synthesis thread verifies."""
    await drive(run, lambda: run.pipeline.synthesizing > 0, "a synthesis waiting")
    assert run.pipeline.backlog > 0


async def test_without_threads_of_its_own_verification_takes_a_synthesis_turn() -> None:
    _, workload = await one_synthesis_thread_while_2_verifies(0, a_synthesis_waits)
    assert workload.synthesized_while_held == 0
    assert sorted(workload.verified) == list(range(2, 100, 3))


async def test_verification_moved_onto_the_synthesis_threads_takes_their_turns() -> None:
    run, workload = await one_synthesis_thread_while_2_verifies(1, a_synthesis_waits, shared=True)
    assert workload.synthesized_while_held == 0
    assert sorted(workload.verified) == list(range(2, 100, 3))
    calls = run.pipeline.calls
    assert (calls.verify_threads, calls.verify_room) == (0, math.inf)
    calls.share_verification(False)  # back on its own thread: bounded again
    assert (calls.verify_threads, calls.verify_room) == (1, 2)


async def test_picks_pass_on_while_the_verify_threads_are_spoken_for() -> None:
    workload = HeldVerification()
    run = build(workload, synth=2, verify_every=1, verify_threads=1)
    pipeline = run.pipeline
    pipeline.enqueue("j", 1, {}, list(range(40)))
    pipeline.start()
    try:
        # One thread: one partition verifying and one waiting for it, no more.
        await drive(run, lambda: len(run.outcomes) >= 20 and pipeline.verifying == 2,
                    "partitions passing unverified")  # fmt: skip
        assert pipeline.holdings.to_verify == 2
        # The third was due and waits for room; each due after it was skipped.
        assert pipeline.verifications_skipped == pipeline.dispatched - 3
        assert all(o.error is None for o in run.outcomes)
        workload.go.set()
        await drive(run, lambda: len(run.outcomes) >= 40, "every partition")
    finally:
        workload.go.set()
        await pipeline.close()
    assert max(workload.to_verify_seen) <= 2
    assert all(o.error is None for o in run.outcomes)
    assert sorted(workload.verified[:2]) == [0, 1]  # in the order they were proved
    # Every dispatch was due: each was verified, skipped, or is the pick still waiting.
    assert 39 <= len(workload.verified) + pipeline.verifications_skipped <= 40


async def test_every_nth_is_verified_where_the_verify_threads_have_room() -> None:
    workload = HeldVerification()
    workload.go.set()
    # Room for every due at once (two a verify thread): whatever the threads' pace, none waits.
    run = build(workload, synth=2, verify_every=4, verify_threads=2)
    run.pipeline.enqueue("j", 1, {}, list(range(16)))
    await run.to_the_end(16)
    assert all(o.error is None for o in run.outcomes)
    assert sorted(workload.verified) == [3, 7, 11, 15]
    assert run.pipeline.verifications_skipped == 0


async def test_a_hung_verification_on_its_own_thread_is_abandoned_and_its_thread_replaced() -> None:
    workload = HeldVerification(hold={1})
    run = build(workload, synth=1, verify_every=2, verify_threads=1, verify_s=5.0)
    pipeline = run.pipeline
    pipeline.enqueue("j", 1, {}, list(range(6)))
    pipeline.start()
    try:
        await drive(run, lambda: len(run.outcomes) >= 6, "every partition")
        # 1's verification hung past 5 s; a new thread verified 3, waiting behind it.
        assert pipeline.abandoned_threads == 1
        assert pipeline.holdings.to_verify == 0
        workload.go.set()
        await until(lambda: len(workload.verified) == 2, "the hung verification to return")
    finally:
        workload.go.set()
        await pipeline.close()
    failed = {o.index: o.call for o in run.outcomes if o.error is not None}
    assert failed == {1: "verify"}
    assert workload.verified == [3, 1]  # 1's call ended late, once let go
    assert pipeline.verifications_skipped == 0
