"""The asyncio pipeline with a hand-written workload: order, budget, failures, cancel, drain,
time limits. On virtual time: the clock moves when the test moves it (tests/pipeline/
virtual_time.py); the workload's calls run on the pipeline's real threads."""

from __future__ import annotations

import asyncio
import math
import threading
import tracemalloc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from pacer.config import ControllerSettings, TimeoutSettings
from pacer.control.controller import PIController
from pacer.control.estimates import Estimates
from pacer.control.policy import Caps, SynthesisParts
from pacer.pipeline import Outcome, Pipeline
from pacer.pipeline.attempts import Call, CallLimits
from pacer.pipeline.calls import PoolCalls
from pacer.pipeline.work import Running, Work
from pacer.workload import PartitionSpec, Proof, Workload
from tests.conftest import FakeClock
from tests.pipeline.virtual_time import VirtualTimers, run_until, settle
from tests.waits import until

pytestmark = pytest.mark.asyncio


class Recording(Workload):
    """Records what it is asked to do; fails where told; 100 bytes a partition."""

    name = "recording"

    def __init__(self, fail_synthesis: int | None = None, fail_prove: int | None = None) -> None:
        self.synthesized: list[tuple[str, int]] = []
        self.inflight_seen: list[int] = []
        self.fail_synthesis = fail_synthesis
        self.fail_prove = fail_prove
        self.pipeline: Pipeline | None = None
        self.lock = threading.Lock()
        self.verified: list[int] = []

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return dict(params)

    def partition_bytes(self, params: Mapping[str, Any]) -> int:
        return 100

    def synthesize(self, spec: PartitionSpec) -> Any:
        with self.lock:
            self.synthesized.append((spec.job_id, spec.index))
            if self.pipeline is not None:
                self.inflight_seen.append(self.pipeline.inflight_bytes)
        if spec.index == self.fail_synthesis:
            raise RuntimeError("no witness")
        return spec.index

    def prove(self, buffers: Any, worker: int, keep_output: bool = True) -> Proof:
        if buffers == self.fail_prove:
            raise RuntimeError("device lost")
        return Proof(f"d{buffers}", {"work": 0.0})

    def verify(self, spec: PartitionSpec, buffers: Any, proof: Proof) -> bool:
        with self.lock:
            self.verified.append(spec.index)
        return proof.digest == f"d{buffers}"


@dataclass
class Run:
    """A pipeline on virtual time, and what it reported."""

    pipeline: Pipeline
    clock: FakeClock
    timers: VirtualTimers
    outcomes: list[Outcome] = field(default_factory=list)
    failures: list[tuple[str, BaseException]] = field(default_factory=list)

    async def until(self, done: Callable[[], object], what: str) -> None:
        """Run the started pipeline on virtual time until ``done()``."""
        await run_until(self.pipeline, self.timers, done, what)

    async def to_the_end(self, expected: int) -> None:
        """Start, run until ``expected`` outcomes are in, close."""
        self.pipeline.start()
        try:
            await self.until(lambda: len(self.outcomes) >= expected, f"{expected} outcomes")
        finally:
            await self.pipeline.close()


def build(
    workload: Recording, budget: int = 10_000, workers: int = 1, synth: int = 1,
    verify_every: int = 0, **limits: float,
) -> Run:  # fmt: skip
    """A pipeline of ``workload`` on a virtual clock, paced by the PI controller on the same
    clock, with ``limits`` (TimeoutSettings) on its calls."""
    clock = FakeClock()
    timers = VirtualTimers(clock)
    outcomes: list[Outcome] = []
    caps = Caps(synthesis_concurrency=synth, inflight_partitions=budget // 100)
    controller = PIController(ControllerSettings(), caps, clock, Estimates(0.01, 0.01))
    pipeline = Pipeline(controller, workload, caps, workers=workers, budget_bytes=budget,
                        on_outcome=outcomes.append, verify_every=verify_every,
                        limits=CallLimits(TimeoutSettings(**limits)), clock=clock,
                        timers=timers)  # fmt: skip
    run = Run(pipeline, clock, timers, outcomes)
    pipeline.on_task_failure = lambda task, exc: run.failures.append((task, exc))
    workload.pipeline = pipeline
    return run


async def test_backlog_runs_in_priority_then_arrival_then_index_order() -> None:
    workload = Recording()
    run = build(workload)
    run.pipeline.enqueue("old", 1, {}, [2, 0, 1], priority=0, order=1)
    run.pipeline.enqueue("new", 1, {}, [0, 1], priority=0, order=2)
    run.pipeline.enqueue("urgent", 1, {}, [1, 0], priority=5, order=3)
    await run.to_the_end(7)
    assert workload.synthesized == [
        ("urgent", 0), ("urgent", 1), ("old", 0), ("old", 1), ("old", 2), ("new", 0), ("new", 1),
    ]  # fmt: skip
    assert all(o.error is None and o.proof is not None for o in run.outcomes)


async def test_a_job_of_a_million_partitions_costs_the_backlog_a_few_objects() -> None:
    pipeline = build(Recording()).pipeline
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        pipeline.enqueue("big", 1, {}, range(1_000_000))
        allocated = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert pipeline.backlog == 1_000_000
    assert allocated < 100 * 1024  # a list of a million ints alone would be ~36 MiB
    pending = pipeline._backlog.pending("big")
    assert pending is not None
    assert pending.runs() == [(0, 1_000_000)]


async def test_memory_budget_bounds_bytes_in_flight() -> None:
    workload = Recording()
    run = build(workload, budget=250, workers=2, synth=4)
    run.pipeline.enqueue("j", 1, {}, list(range(30)))
    await run.to_the_end(30)
    assert len(run.outcomes) == 30
    assert max(workload.inflight_seen) <= 250  # counted from dispatch, this one included
    assert run.pipeline.inflight_bytes == 0


@pytest.mark.parametrize(("where", "message"), [("synthesis", "synthesis failed"),
                                                ("prove", "proving failed")])  # fmt: skip
async def test_a_failure_is_reported_and_releases_memory(where: str, message: str) -> None:
    run = build(Recording(**{f"fail_{where}": 2}))
    run.pipeline.enqueue("j", 1, {}, list(range(4)))
    await run.to_the_end(4)
    failed = [o for o in run.outcomes if o.error]
    assert [o.index for o in failed] == [2]
    assert message in (failed[0].error or "")
    assert run.pipeline.inflight_bytes == 0
    assert run.pipeline.inflight == 0


async def test_verification_runs_on_every_nth_partition() -> None:
    workload = Recording()
    run = build(workload, verify_every=2)
    run.pipeline.enqueue("j", 1, {}, list(range(6)))
    await run.to_the_end(6)
    assert len(run.outcomes) == 6
    assert all(o.error is None for o in run.outcomes)
    assert sorted(workload.verified) == [1, 3, 5]  # every second dispatched, in index order
    # The checked ones carry how long their check took (the clock stands still here: 0 s).
    assert {o.index: o.verify_s for o in run.outcomes} == {0: None, 1: 0.0, 2: None, 3: 0.0,
                                                            4: None, 5: 0.0}  # fmt: skip


async def test_cancel_drops_the_backlog_and_silences_the_job() -> None:
    run = build(Recording())
    run.pipeline.enqueue("keep", 1, {}, [0, 1], order=2)
    run.pipeline.enqueue("drop", 1, {}, list(range(50)), priority=1, order=1)
    assert run.pipeline.cancel("drop") == 50
    assert run.pipeline.backlog == 2
    await run.to_the_end(2)
    assert {o.job_id for o in run.outcomes} == {"keep"}


async def test_drain_stops_dispatch_and_waits_for_in_flight_work() -> None:
    run = build(Recording())
    pipeline = run.pipeline
    pipeline.enqueue("j", 1, {}, list(range(1000)))
    pipeline.start()
    await until(lambda: run.outcomes, "a first outcome")
    assert await pipeline.drain(10.0)  # the clock stands still: in-flight work ended it
    done = len(run.outcomes)
    assert pipeline.idle
    assert pipeline.backlog == 1000 - done  # the rest stays for the journal
    await pipeline.close()


class Keeping(Recording):
    """Takes ``keep_output`` and records, per partition, what the pipeline asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: dict[int, bool] = {}
        self.verified: list[int] = []

    def prove(self, buffers: Any, worker: int, keep_output: bool = True) -> Proof:
        self.kept[buffers] = keep_output
        return Proof(f"d{buffers}", {}, buffers if keep_output else None)

    def verify(self, spec: PartitionSpec, buffers: Any, proof: Proof) -> bool:
        assert proof.output == buffers  # what verification reads was kept
        self.verified.append(spec.index)
        return True


async def test_output_is_kept_exactly_for_the_partitions_that_are_verified() -> None:
    workload = Keeping()
    run = build(workload, verify_every=3)
    run.pipeline.enqueue("j", 1, {}, list(range(9)))
    await run.to_the_end(9)
    assert all(o.error is None for o in run.outcomes)
    assert sorted(workload.verified) == [2, 5, 8]  # every third dispatched
    assert {i for i, kept in workload.kept.items() if kept} == {2, 5, 8}


class TwoPerDevice(Recording):
    def device_of(self, worker: int) -> int:
        return 4 + worker // 2


async def test_busy_time_and_outcomes_are_labelled_by_device() -> None:
    run = build(TwoPerDevice(), workers=4, synth=2)
    pipeline = run.pipeline
    assert pipeline.gpus == [4, 5]
    assert pipeline.workers_on(4) == 2
    pipeline.enqueue("j", 1, {}, list(range(20)))
    await run.to_the_end(20)
    assert {o.gpu for o in run.outcomes} <= {4, 5}
    assert all(pipeline.busy_seconds(g) >= 0 for g in pipeline.gpus)


class Hanging(Recording):
    """Synthesis or proving of partition ``hang_at`` waits for ``unblock`` (30 s at most)."""

    def __init__(self, where: str, hang_at: int = 0) -> None:
        super().__init__()
        self.where = where
        self.hang_at = hang_at
        self.unblock = threading.Event()
        self.entered = threading.Event()
        self.released: list[Any] = []

    def _maybe_hang(self, where: str, index: int) -> None:
        if where == self.where and index == self.hang_at:
            self.entered.set()
            self.unblock.wait(30)

    def synthesize(self, spec: PartitionSpec) -> Any:
        self._maybe_hang("synthesis", spec.index)
        return super().synthesize(spec)

    def prove(self, buffers: Any, worker: int, keep_output: bool = True) -> Proof:
        self._maybe_hang("prove", buffers)
        return super().prove(buffers, worker, keep_output)


async def test_a_prove_past_its_limit_is_abandoned_and_its_worker_replaced() -> None:
    workload = Hanging("prove")
    run = build(workload, prove_s=5.0)
    pipeline, outcomes = run.pipeline, run.outcomes
    pipeline.enqueue("j", 1, {}, [0])
    pipeline.start()
    try:
        await asyncio.to_thread(workload.entered.wait, 10)
        hung_thread = pipeline.provers.workers[0].thread
        await run.timers.step(4.0)
        assert not outcomes  # within its limit
        assert pipeline.check_limits() == 0
        await run.timers.step(2.0)  # the watchdog's next check finds it late
        await until(lambda: outcomes, "the prove to be abandoned")
        assert pipeline.check_limits() == 0  # once
        assert [(o.index, o.error, o.call) for o in outcomes] == [
            (0, "prove timed out after 5 s", "prove")
        ]
        assert [(task, str(exc)) for task, exc in run.failures] == [
            ("prove-0", "prove timed out after 5 s")
        ]
        assert pipeline.provers.workers[0].thread is not hung_thread
        assert (pipeline.live_workers, pipeline.abandoned_threads) == (1, 1)
        assert (pipeline.inflight, pipeline.abandoned, pipeline.inflight_bytes) == (0, 1, 100)
        assert pipeline.idle
        assert pipeline.gpu_busy == 0
        pipeline.enqueue("j", 1, {}, [1])  # the new thread proves the next one
        await run.until(lambda: len(outcomes) == 2, "partition 1's outcome")
        assert outcomes[1].proof is not None
        assert pipeline.inflight_bytes == 100  # the hung call's partition, still held
        workload.unblock.set()
        await until(lambda: pipeline.abandoned_threads == 0, "the hung thread to end")
        await until(lambda: pipeline.inflight_bytes == 0, "the hung partition's bytes back")
        assert pipeline.abandoned == 0
        assert len(outcomes) == 2  # the late return reports nothing
    finally:
        workload.unblock.set()
        await pipeline.close()


async def test_a_hung_synthesis_keeps_its_bytes_until_it_returns() -> None:
    workload = Hanging("synthesis")
    run = build(workload, budget=100, synthesis_s=5.0)
    pipeline, outcomes = run.pipeline, run.outcomes
    pipeline.enqueue("j", 1, {}, [0, 1])
    pipeline.start()
    try:
        await asyncio.to_thread(workload.entered.wait, 10)
        await run.timers.step(6.0)
        await until(lambda: outcomes, "the synthesis to be abandoned")
        assert [(o.index, o.error) for o in outcomes] == [(0, "synthesis timed out after 5 s")]
        assert [task for task, _ in run.failures] == ["synthesis"]
        assert pipeline.synthesizing == 0
        assert pipeline.abandoned_threads == 1
        # A budget of one partition: the next waits until the hung call gives it back, however
        # long (every wait of the pipeline ends meanwhile, and what it dispatches has ended).
        await run.timers.step(60.0)
        await settle(pipeline, run.timers)
        assert pipeline.backlog == 1
        workload.unblock.set()
        await until(lambda: pipeline.inflight_bytes == 0, "the hung partition's bytes back")
        await run.until(lambda: len(outcomes) == 2, "partition 1's outcome")
        assert outcomes[1].index == 1
        assert outcomes[1].proof is not None
        assert workload.synthesized.count(("j", 0)) == 1  # not run again by the pipeline
    finally:
        workload.unblock.set()
        await pipeline.close()


async def test_an_abandoned_synthesis_releases_the_buffers_it_returns_late() -> None:
    class Releasing(Hanging):
        def release(self, buffers: Any) -> None:
            self.released.append(buffers)

    workload = Releasing("synthesis")
    run = build(workload, synthesis_s=5.0)
    run.pipeline.enqueue("j", 1, {}, [0])
    run.pipeline.start()
    try:
        await asyncio.to_thread(workload.entered.wait, 10)
        await run.timers.step(6.0)
        await until(lambda: run.outcomes, "the synthesis to be abandoned")
        workload.unblock.set()
        await until(lambda: run.pipeline.abandoned == 0, "the abandoned call to return")
        assert workload.released == [0]  # the late buffers went back to the workload
    finally:
        workload.unblock.set()
        await run.pipeline.close()


class Stopping(Hanging):
    """Records each call the pipeline abandons, and stops it: the hung call returns."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.abandoned_calls: list[tuple[str, int, str]] = []
        self.specs: dict[str, list[PartitionSpec]] = {"synthesize": [], "abandoned": []}

    def synthesize(self, spec: PartitionSpec) -> Any:
        self.specs["synthesize"].append(spec)
        return super().synthesize(spec)

    def abandoned(self, spec: PartitionSpec, call: str) -> None:
        self.abandoned_calls.append((spec.job_id, spec.index, call))
        self.specs["abandoned"].append(spec)
        self.unblock.set()


@pytest.mark.parametrize(
    ("where", "call"), [("synthesis", "synthesize"), ("prove", "prove")], ids=["synthesis", "prove"]
)
async def test_the_workload_hears_once_of_a_call_abandoned_and_may_stop_it(
    where: str, call: str
) -> None:
    workload = Stopping(where)
    run = build(workload, synthesis_s=5.0, prove_s=5.0)
    pipeline = run.pipeline
    pipeline.enqueue("j", 1, {}, [0])
    pipeline.start()
    try:
        await asyncio.to_thread(workload.entered.wait, 10)
        await run.timers.step(4.0)
        assert pipeline.check_limits() == 0
        assert workload.abandoned_calls == []  # within its limit
        await run.timers.step(2.0)
        await until(lambda: run.outcomes, f"the {where} to be abandoned")
        assert workload.abandoned_calls == [("j", 0, call)]
        (given,), (told,) = workload.specs.values()
        assert told is given  # the attempt's own spec: a workload tells it from a retry
        # Stopped, the call returns without the test's help: its bytes and thread come back.
        await until(lambda: pipeline.abandoned_threads == 0, "the stopped call to return")
        await until(lambda: pipeline.inflight_bytes == 0, "the partition's bytes back")
        assert pipeline.check_limits() == 0
        assert workload.abandoned_calls == [("j", 0, call)]  # once
    finally:
        workload.unblock.set()
        await pipeline.close()


class Fatal(BaseException):
    pass


class RaisingBase(Recording):
    def prove(self, buffers: Any, worker: int, keep_output: bool = True) -> Proof:
        if buffers == 0:
            raise Fatal("a native binding's exit")
        return super().prove(buffers, worker, keep_output)


async def test_a_base_exception_from_prove_fails_the_attempt_not_the_worker() -> None:
    run = build(RaisingBase())
    pipeline, outcomes = run.pipeline, run.outcomes
    pipeline.enqueue("j", 1, {}, [0])
    pipeline.start()
    try:
        await run.until(lambda: outcomes, "partition 0's outcome")
        pipeline.enqueue("j", 1, {}, [1])
        await run.until(lambda: len(outcomes) == 2, "partition 1's outcome")
        assert outcomes[0].error == 'proving failed: Fatal("a native binding\'s exit")'
        assert outcomes[1].proof is not None  # the same thread proved the next
        assert [task for task, _ in run.failures] == ["prove-0"]
        assert pipeline.live_workers == 1
        assert pipeline.inflight_bytes == 0
    finally:
        await pipeline.close()


async def test_a_worker_thread_that_dies_is_replaced_and_its_partition_failed() -> None:
    run = build(Recording())
    pipeline, outcomes = run.pipeline, run.outcomes
    gpu = pipeline.provers.gpus[0]
    begin = gpu.begin

    def broken_once(now: float) -> float | None:
        gpu.begin = begin  # type: ignore[method-assign]
        raise RuntimeError("a bug of pacer's own")

    gpu.begin = broken_once  # type: ignore[method-assign]
    pipeline.enqueue("j", 1, {}, [0])
    pipeline.start()
    try:
        await run.until(lambda: outcomes, "partition 0's outcome")
        assert outcomes[0].error == 'proving worker died: RuntimeError("a bug of pacer\'s own")'
        assert [task for task, _ in run.failures] == ["prove-0"]
        await until(lambda: pipeline.live_workers == 1, "a new proving thread")
        pipeline.enqueue("j", 1, {}, [1])
        await run.until(lambda: len(outcomes) == 2, "partition 1's outcome")
        assert outcomes[1].proof is not None
        assert pipeline.inflight_bytes == 0
    finally:
        await pipeline.close()


class BadProofs(Recording):
    def prove(self, buffers: Any, worker: int, keep_output: bool = True) -> Any:
        return {0: None, 1: Proof("two words"), 2: Proof("ok", {"ntt": math.nan})}[buffers]


async def test_a_proof_unfit_to_journal_fails_the_attempt() -> None:
    run = build(BadProofs())
    pipeline, outcomes = run.pipeline, run.outcomes
    pipeline.start()
    try:
        for index in range(3):
            pipeline.enqueue("j", 1, {}, [index])
            await run.until(lambda: pipeline.backlog == 0, f"partition {index} to leave")
        assert [o.error for o in outcomes] == [
            "proving returned NoneType, not a Proof",
            "proving returned an invalid digest 'two words': a non-empty string without spaces",
            "proving returned phase 'ntt' of nan s: a finite number of seconds >= 0 by name",
        ]
        assert all(o.proof is None and o.call == "prove" for o in outcomes)
        assert isinstance(pipeline.controller, PIController)
        assert pipeline.controller.estimates.gpu_service_s == 0.01  # no sample from them
    finally:
        await pipeline.close()


class Gated(Recording):
    """Partition 0's synthesis and every proof wait for their gate."""

    def __init__(self) -> None:
        super().__init__()
        self.synthesis_gate = threading.Event()
        self.prove_gate = threading.Event()

    def synthesize(self, spec: PartitionSpec) -> Any:
        if spec.index == 0:
            self.synthesis_gate.wait(5)
        return super().synthesize(spec)

    def prove(self, buffers: Any, worker: int, keep_output: bool = True) -> Proof:
        self.prove_gate.wait(5)
        return super().prove(buffers, worker, keep_output)


async def test_observation_has_live_workers_and_the_ages_of_what_runs() -> None:
    workload = Gated()
    run = build(workload, workers=2, synth=2)
    pipeline = run.pipeline
    pipeline.enqueue("j", 1, {}, [0, 1])
    pipeline.start()
    await until(lambda: pipeline.gpu_busy == 1 and pipeline.synthesizing == 1,
                "partition 1 on a GPU, partition 0 still in synthesis")  # fmt: skip
    run.clock.advance(0.25)
    obs = pipeline.observation()
    assert (obs.gpu_workers, obs.synthesizing, obs.gpu_busy) == (2, 1, 1)
    assert obs.synthesis_ages_s == obs.gpu_busy_ages_s == (0.25,)
    # A worker whose thread has ended proves nothing more and leaves the count.
    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join()
    idle = next(w for w in pipeline.provers.workers if w.busy_since is None)
    running, idle.thread = idle.thread, ended
    assert pipeline.observation().gpu_workers == 1
    idle.thread = running
    workload.synthesis_gate.set()
    workload.prove_gate.set()
    await run.until(lambda: len(run.outcomes) == 2, "both outcomes")
    await pipeline.close()
    assert pipeline.observation().synthesis_ages_s == ()


async def test_a_partition_a_gate_refuses_is_not_proved_and_gives_its_memory_back() -> None:
    run = build(Recording(), workers=2, synth=2)
    refused: list[tuple[str, int]] = []
    run.pipeline.provers.gate = lambda job, index: None if index % 3 == 0 else (9, index)
    run.pipeline.on_refused = lambda job, index: refused.append((job, index))
    run.pipeline.enqueue("j", 1, {}, list(range(9)))
    run.pipeline.start()
    try:
        await run.until(lambda: len(run.outcomes) + len(refused) >= 9, "every partition")
    finally:
        await run.pipeline.close()
    assert sorted(refused) == [("j", 0), ("j", 3), ("j", 6)]
    assert sorted((o.index, o.lease) for o in run.outcomes) == [
        (i, (9, i)) for i in (1, 2, 4, 5, 7, 8)
    ]
    assert run.pipeline.inflight_bytes == 0
    assert run.pipeline.provers.ready == 0


@pytest.mark.parametrize("where", ["synthesis", "prove"])
async def test_a_partition_in_flight_is_not_queued_again(where: str) -> None:
    """A partition queued again while it is in flight (a fleet's host claiming a run again,
    a retry) is left out: it is proved once; the others queued with it are queued."""
    workload = Hanging(where, hang_at=1)
    run = build(workload, workers=2, synth=2, synthesis_s=3600.0, prove_s=3600.0)
    pipeline, outcomes = run.pipeline, run.outcomes
    pipeline.enqueue("j", 1, {}, [0, 1])
    pipeline.start()
    try:
        await asyncio.to_thread(workload.entered.wait, 10)
        await until(lambda: outcomes, "partition 0's outcome")  # partition 1 hangs meanwhile
        assert pipeline.holdings.indices("j") == [1]
        pipeline.enqueue("j", 1, {}, range(3))
        assert pipeline.waiting("j") == 2  # 0 (proved: the journal's to judge) and 2
        workload.unblock.set()
        await run.until(lambda: len(outcomes) == 4, "every outcome")
    finally:
        workload.unblock.set()
        await pipeline.close()
    assert sorted(o.index for o in outcomes) == [0, 0, 1, 2]
    assert pipeline.holdings.indices("j") == []


def two_on_one_thread() -> tuple[Gated, FakeClock, PoolCalls, list[Work], list[Running]]:
    """Partitions 0 and 1 dispatched at once to one synthesis thread; partition 0's synthesis
    waits for the workload's gate. Returns the workload, the clock, the calls, the two works
    and the list each synthesized call is appended to."""
    workload, clock = Gated(), FakeClock()
    done: list[Running] = []
    calls = PoolCalls(workload, 1, clock=clock, synthesized=done.append, verified=done.append)
    works = [Work(PartitionSpec("j", i, 1, {}), 100, dispatched_at=clock()) for i in (0, 1)]
    for work in works:
        calls.synthesize(work)
    return workload, clock, calls, works, done


async def test_a_synthesis_that_waits_for_a_worker_reports_its_wait() -> None:
    # One synthesis thread: partition 1 waits for it while partition 0's synthesis is held.
    # Partition 0's trip out is known (the thread was free), partition 1's holds its wait.
    workload, clock, calls, works, done = two_on_one_thread()
    await until(lambda: works[0].synthesis_began is not None, "partition 0 begun")
    assert works[1].synthesis_parts(clock()) is None  # not synthesized yet
    clock.advance(0.5)
    workload.synthesis_gate.set()
    await until(lambda: len(done) == 2, "both synthesized")
    assert [w.synthesis_wait_s for w in works] == [0.0, 0.5]
    clock.advance(0.25)  # the trip back to the service
    assert [w.thread_free for w in works] == [True, False]
    assert [w.synthesis_parts(clock()) for w in works] == [
        SynthesisParts(compute_s=0.5, back_s=0.25, out_s=0.0),
        SynthesisParts(compute_s=0.0, back_s=0.25, out_s=None),
    ]
    calls.shutdown()


async def test_a_synthesis_limit_counts_from_when_a_thread_takes_it() -> None:
    # One synthesis thread, a 5 s limit: partition 0 holds the thread past it; partition 1,
    # dispatched as long ago, waits for the thread and is not late.
    workload, clock, calls, works, done = two_on_one_thread()
    limits: dict[Call, float] = {"synthesis": 5.0, "prove": 5.0, "verify": 5.0}
    try:
        await until(lambda: works[0].synthesis_began is not None, "partition 0 begun")
        clock.advance(4.9)
        assert calls.late(clock(), limits) == []
        clock.advance(1.0)
        assert [r.work.spec.index for r in calls.late(clock(), limits)] == [0]
    finally:
        workload.synthesis_gate.set()
    await until(lambda: len(done) == 2, "both synthesized")
    assert works[1].synthesis_began == pytest.approx(5.9)
    assert [r.started for r in done] == [0.0, pytest.approx(5.9)]
    calls.shutdown()
