"""Hung syntheses on a host whose syntheses share the cores: they compute nothing, so the
cores they leave are the others' (`RateDispatch.room`)."""

from __future__ import annotations

from typing import Any

from pacer.config import Settings
from pacer.control.policy import Caps, Observation
from pacer.control.rate_dispatch import RateDispatch
from pacer.sim.scenario import Scenario
from pacer.sim.suite import run_policy


def host(hangs: int) -> Scenario:
    """One GPU of 0.25 s fed by six synthesis slots of 0.87 s (1.7 times what it takes);
    ``hangs`` syntheses hang from 60 s to the end."""
    synthesis: dict[str, Any] = {
        "duration_s": {"dist": "lognormal", "median": 0.85, "sigma": 0.2},
        "threads_per_synthesis": 1, "cores": 6,
        "hangs": [{"at_s": 60.0 + i} for i in range(hangs)],
    }  # fmt: skip
    return Scenario.model_validate({
        "name": f"hung-cores-{hangs}", "duration_s": 300, "seed": 11,
        "gpu": {"workers": 1, "service_s": {"dist": "lognormal", "median": 0.25, "sigma": 0.1}},
        "synthesis": synthesis,
        "partition": {"bytes": 1},
        "memory": {"budget_bytes": 40},
        "jobs": {"partitions_per_job": 10, "arrival": {"kind": "backlog", "jobs": 200}},
    })  # fmt: skip


def test_a_hung_synthesis_takes_no_core_where_syntheses_share_them() -> None:
    shared = RateDispatch(Caps(synthesis_concurrency=6, inflight_partitions=40))
    full = Observation(ready=0, synthesizing=6, gpu_busy=1, gpu_workers=1, backlog=100)
    assert (shared.room(full), shared.room(full, stuck=4)) == (0, 4)
    # Where each synthesis holds a process, a hung one keeps it.
    processes = RateDispatch(Caps(6, 40, synthesis_queue=True))
    assert processes.room(full, stuck=4) == processes.room(full) == 0


def test_four_hung_of_six_slots_leave_pi_as_busy_as_unpaced() -> None:
    settings = Settings()
    pi = run_policy(host(4), "pi", settings)[1]
    unpaced = run_policy(host(4), "unpaced", settings)[1]
    unhung = run_policy(host(0), "pi", settings)[1]
    # Counted against the six slots, the four hung would leave two: 2.3 a second for a GPU
    # that takes 4, and pi's GPU busy a little over half the time.
    assert pi.gpu_busy_ratio >= unpaced.gpu_busy_ratio - 0.005
    assert pi.gpu_busy_ratio >= 0.99
    # They hold their memory, and no more than that is added.
    assert pi.mean_inflight_partitions <= unhung.mean_inflight_partitions + 4
