"""The synthesis workers' busy time, as `pacer_synthesis_busy_ratio` and
`pacer_synthesis_busy_seconds_total` export it: each synthesis's time on its thread, counted
when it ends, and the syntheses still running counted up to now. On virtual time."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from pacer.workload import PartitionSpec
from tests.pipeline.test_pipeline import Recording, build
from tests.pipeline.test_verify_threads import drive

pytestmark = pytest.mark.asyncio

SYNTHESIS_S = 2.0


class TimedSynthesis(Recording):
    """Each synthesis takes ``SYNTHESIS_S`` of the run's virtual clock; partition 3's waits
    until the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.clock: Any = None
        self.holding = threading.Event()
        self.go = threading.Event()

    def synthesize(self, spec: PartitionSpec) -> Any:
        self.clock.advance(SYNTHESIS_S)
        if spec.index == 3:
            self.holding.set()
            assert self.go.wait(30), "the test never let the synthesis go"
        return super().synthesize(spec)


async def test_each_synthesis_counts_its_time_on_its_thread_and_one_running_counts_so_far() -> None:
    workload = TimedSynthesis()
    run = build(workload, synth=1)  # one thread: each synthesis alone moves the clock
    workload.clock = run.clock
    calls = run.pipeline.calls
    assert (calls.synthesis_busy_seconds(), calls.synthesis_busy_ratio()) == (0.0, 0.0)
    run.pipeline.enqueue("j", 1, {}, list(range(6)))
    run.pipeline.start()
    try:
        await drive(run, workload.holding.is_set, "partition 3's synthesis held on its thread")
        held = calls.synthesis_busy_seconds()
        run.clock.advance(5.0)  # partition 3 still runs: its 5 s more count at once
        assert calls.synthesis_busy_seconds() == pytest.approx(held + 5.0)
        assert 0 < calls.synthesis_busy_ratio() <= 1
        workload.go.set()
        await drive(run, lambda: len(run.outcomes) >= 6, "six outcomes")
    finally:
        workload.go.set()
        await run.pipeline.close()
    assert all(o.error is None for o in run.outcomes)
    # Six syntheses of 2 s, and the 5 s partition 3 was held besides.
    assert calls.synthesis_busy_seconds() == pytest.approx(6 * SYNTHESIS_S + 5.0)
