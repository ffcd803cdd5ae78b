"""A hung prove on a one-worker pipeline, on virtual time: abandoned at max(10 × the GPU
service-time estimate, the 30 s floor), its worker replaced, and readiness saying so while no
worker makes progress."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pacer.config import TimeoutSettings
from pacer.control.estimates import Estimates
from pacer.pipeline.attempts import CallLimits
from pacer.workload import PartitionSpec, Proof
from tests.pipeline.test_pipeline import Hanging, Run, build
from tests.waits import until

pytestmark = pytest.mark.asyncio


def derived_limits(run: Run, gpu_service_s: float | None) -> None:
    """Default TimeoutSettings on ``gpu_service_s`` as the controller's estimate (None: none)."""
    estimates = None if gpu_service_s is None else Estimates(gpu_service_s, 1.0)
    run.pipeline.limits = CallLimits(TimeoutSettings(), lambda: estimates)


@pytest.mark.parametrize(
    ("gpu_service_s", "limit_s"),
    [(None, 30.0), (0.5, 30.0), (7.0, 70.0)],
    ids=["cold-start-floor", "fast-gpu-floor", "ten-estimates"],
)
async def test_a_hung_prove_is_abandoned_at_ten_estimates_or_the_floor(
    gpu_service_s: float | None, limit_s: float
) -> None:
    workload = Hanging("prove")
    run = build(workload)
    derived_limits(run, gpu_service_s)
    pipeline, outcomes = run.pipeline, run.outcomes
    pipeline.enqueue("j", 1, {}, [0, 1])
    pipeline.start()
    try:
        await asyncio.to_thread(workload.entered.wait, 10)
        hung_thread = pipeline.provers.workers[0].thread
        await run.timers.step(limit_s - 1)
        assert not outcomes  # within its limit
        await run.timers.step(2.0)  # the watchdog's next check finds it late
        await until(lambda: outcomes, "the prove to be abandoned")
        assert (outcomes[0].index, outcomes[0].error) == (0, f"prove timed out after {limit_s:g} s")
        assert pipeline.provers.workers[0].thread is not hung_thread
        await run.until(lambda: len(outcomes) == 2, "partition 1 proved by the new thread")
        assert outcomes[1].index == 1
        assert outcomes[1].proof is not None
        assert pipeline.provers.progress.reasons() == []
    finally:
        workload.unblock.set()
        await pipeline.close()


class HangingAll(Hanging):
    """Every prove waits for ``unblock``: a device that no longer returns."""

    def prove(self, buffers: Any, worker: int, keep_output: bool = True) -> Proof:
        self.entered.set()
        self.unblock.wait(30)
        return Proof(f"d{buffers}", {"work": 0.0})

    def synthesize(self, spec: PartitionSpec) -> Any:
        return spec.index


async def test_readiness_says_no_worker_makes_progress_until_a_prove_returns() -> None:
    workload = HangingAll("prove")
    run = build(workload)
    derived_limits(run, None)
    pipeline, progress = run.pipeline, run.pipeline.provers.progress
    pipeline.enqueue("j", 1, {}, [0, 1, 2])
    pipeline.start()
    try:
        await asyncio.to_thread(workload.entered.wait, 10)
        await run.timers.step(29.0)
        assert progress.reasons() == []
        assert progress.stalled_s() == pytest.approx(29.0)
        await run.timers.step(2.0)  # partition 0 abandoned; the new thread hangs on the next
        await until(lambda: run.outcomes, "the prove to be abandoned")
        assert progress.reasons() == [
            "no GPU worker making progress: partitions wait and no prove returned "
            "for 31.0 s (limit 30 s)"
        ]
        await run.timers.step(20.0)
        assert progress.stalled()
        assert progress.stalled_s() == pytest.approx(51.0)
        workload.unblock.set()  # the device answers again
        await until(lambda: len(run.outcomes) >= 2, "a prove to return")
        assert progress.reasons() == []
    finally:
        workload.unblock.set()
        await pipeline.close()
