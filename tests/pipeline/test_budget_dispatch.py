"""The byte budget and the controller's pacing in the pipeline, on virtual time: partitions of a
job larger than the size the caps were sized for fill the budget before any cap does, and the
controller must pay (synthesis tokens, credit, refill) only for what the budget lets start."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from pacer.config import ControllerSettings
from pacer.control.controller import PIController
from pacer.control.estimates import Estimates
from pacer.control.policy import Caps, Decision, Observation
from pacer.pipeline import Pipeline
from pacer.workload import PartitionSpec, Proof, Workload
from tests.conftest import FakeClock
from tests.pipeline.virtual_time import LOOPS, VirtualTimers
from tests.waits import until

pytestmark = pytest.mark.asyncio

NOMINAL_BYTES = 100  # the size the caps are sized for
BUDGET_BYTES = 1000  # ten nominal partitions; two of 400 bytes


class Sized(Workload):
    """Partitions of ``params["bytes"]`` bytes (100 by default); each synthesis and each proof
    waits for a permit the test gives, so partitions hold their bytes as long as it says."""

    name = "sized"

    def __init__(self) -> None:
        self.syntheses = threading.Semaphore(0)
        self.proofs = threading.Semaphore(0)

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return dict(params)

    def partition_bytes(self, params: Mapping[str, Any]) -> int:
        return int(params.get("bytes", NOMINAL_BYTES))

    def synthesize(self, spec: PartitionSpec) -> Any:
        self.syntheses.acquire(timeout=10)
        return spec.index

    def prove(self, buffers: Any, worker: int, keep_output: bool = True) -> Proof:
        self.proofs.acquire(timeout=10)
        return Proof(f"d{buffers}", {})

    def verify(self, spec: PartitionSpec, buffers: Any, proof: Proof) -> bool:
        return True


class Recorded(PIController):
    """The PI controller, counting the partitions it asked for in all."""

    asked = 0

    def decide(self, obs: Observation) -> Decision:
        decision = super().decide(obs)
        self.asked += decision.dispatch
        return decision


async def test_the_controller_pays_only_for_what_the_budget_lets_start() -> None:
    """Four syntheses at once and ten nominal partitions in flight, but the budget holds two
    of the job's 400-byte partitions. The controller asks for those two only: one asked for
    beyond them would spend a synthesis token (and credit, and a refill's count) on nothing,
    and a proof that frees its bytes would then find no token to start the next at once."""
    clock = FakeClock()
    timers = VirtualTimers(clock)
    caps = Caps(synthesis_concurrency=4, inflight_partitions=BUDGET_BYTES // NOMINAL_BYTES)
    # Syntheses of 1 s, 4 at once: the rate cap gives a token back every 0.25 s.
    pi = Recorded(ControllerSettings(), caps, clock, Estimates(gpu_service_s=0.1, synthesis_s=1.0))
    workload = Sized()
    pipeline = Pipeline(pi, workload, caps, workers=1, budget_bytes=BUDGET_BYTES,
                        on_outcome=lambda outcome: None, clock=clock, timers=timers)  # fmt: skip
    pipeline.enqueue("big", 1, {"bytes": 400}, range(8))

    async def settled(what: str, done: Callable[[], bool]) -> None:
        """Until ``done()`` and both loops wait again (the clock moves only by the test)."""
        await until(lambda: done() and timers.parked == LOOPS, what)

    pipeline.start()
    try:
        await settled("two syntheses", lambda: pipeline.synthesizing == 2)
        assert (pipeline.dispatched, pi.asked) == (2, 2)
        await timers.step(1.0)  # the budget still full: the controller's timer asks again
        workload.syntheses.release(2)  # synthesized in 1 s, as estimated
        await settled("both synthesized", lambda: pipeline.synthesizing == 0)
        assert (pipeline.dispatched, pi.asked) == (2, 2)
        workload.proofs.release()  # one proof ends: 400 bytes free
        await settled("one proved", lambda: pipeline.proved == 1)
        assert clock() == 1.0
        assert (pipeline.dispatched, pi.asked) == (3, 3)  # at once, on a token kept
    finally:
        workload.syntheses.release(8)
        workload.proofs.release(8)
        await pipeline.close()


class Counted(Sized):
    """`Sized`, counting the syntheses that have begun in the workload (on a thread); each
    waits for its permit as long as a loaded machine may take to give it."""

    def __init__(self) -> None:
        super().__init__()
        self.begun = 0
        self._lock = threading.Lock()

    def synthesize(self, spec: PartitionSpec) -> Any:
        with self._lock:
            self.begun += 1
        self.syntheses.acquire(timeout=300)
        return spec.index


async def test_a_queued_partition_waits_for_a_thread_holding_its_bytes() -> None:
    """Two synthesis threads and the queue pi keeps in front of them (one: durations that
    never spread). Three partitions are dispatched, counted in memory; two begin. When one
    ends, its thread takes the queued one, and pi fills the queue again."""
    clock = FakeClock()
    timers = VirtualTimers(clock)
    caps = Caps(synthesis_concurrency=2, inflight_partitions=10, synthesis_queue=True)
    pi = PIController(
        ControllerSettings(), caps, clock, Estimates(gpu_service_s=0.1, synthesis_s=1.0)
    )
    workload = Counted()
    pipeline = Pipeline(pi, workload, caps, workers=1, budget_bytes=BUDGET_BYTES,
                        on_outcome=lambda outcome: None, clock=clock, timers=timers)  # fmt: skip
    pipeline.enqueue("many", 1, {}, range(8))
    pipeline.start()
    try:
        await until(lambda: workload.begun == 2 and timers.parked == LOOPS, "two begun")
        await timers.step(0.5)  # a synthesis token back (the burst is the two threads)
        await until(lambda: pipeline.synthesizing == 3 and timers.parked == LOOPS, "one queued")
        assert workload.begun == 2
        assert (pi.synthesis_queue(), pipeline.inflight_bytes) == (1, 3 * NOMINAL_BYTES)
        workload.syntheses.release(1)
        await until(lambda: workload.begun == 3, "the queued one begun")
        await timers.step(0.5)

        # The first duration seen spreads the window: the queue may have grown.
        def refilled() -> bool:
            full = pipeline.synthesizing == 2 + pi.synthesis_queue()
            return full and timers.parked == LOOPS

        await until(refilled, "refilled")
        assert pipeline.dispatched == 3 + pi.synthesis_queue()
        assert workload.begun == 3  # the two threads run two: one ended, one begun
    finally:
        workload.syntheses.release(8)
        workload.proofs.release(8)
        await pipeline.close()
