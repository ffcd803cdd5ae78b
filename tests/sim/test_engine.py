from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from pacer.config import ControllerSettings, Settings
from pacer.control.baselines import FixedConcurrency, Unpaced
from pacer.control.policy import Caps, Decision, Mode, Observation, SynthesisParts
from pacer.control.registry import build_policy
from pacer.sim.engine import Replay, Simulation, VirtualClock
from pacer.sim.report import summarize
from pacer.sim.scenario import Scenario
from pacer.sim.suite import run_policy


def scenario(**over: Any) -> Scenario:
    raw: dict[str, Any] = {
        "name": "t",
        "duration_s": 3600,
        "seed": 3,
        "gpu": {"workers": 1, "service_s": {"dist": "fixed", "value": 1.0}},
        "synthesis": {
            "duration_s": {"dist": "fixed", "value": 10.0},
            "threads_per_synthesis": 4,
            "cores": 8,
        },
        "partition": {"bytes": 1},
        "memory": {"budget_bytes": 100},
        "jobs": {"partitions_per_job": 4, "arrival": {"kind": "backlog", "jobs": 1}},
    }
    for key, value in over.items():
        section, _, field = key.partition("__")
        if field:
            raw[section][field] = value
        else:
            raw[section] = value
    return Scenario.model_validate(raw)


class Recorder:
    """Dispatch ``n`` at t=0 (with ``greedy``, whatever waits at every call) and record what
    the simulator reports; ask to be woken at ``wake_at``."""

    bootstraps = rebootstraps = 0
    mode = Mode.PACING
    synthesis_workers: int | None = None

    def __init__(self, n: int, greedy: bool = False, wake_at: float | None = None) -> None:
        self.n = n
        self.greedy = greedy
        self.wake_at = wake_at
        self.synthesis: list[float] = []
        self.gpu: list[float] = []
        self.failures: list[float] = []
        self.observations: list[Observation] = []

    def observe_synthesis(self, seconds: float, parts: SynthesisParts | None = None) -> None:
        self.synthesis.append(seconds)

    def observe_gpu_service(self, seconds: float) -> None:
        self.gpu.append(seconds)

    def observe_synthesis_failure(self, elapsed_s: float) -> None:
        self.failures.append(elapsed_s)

    def decide(self, obs: Observation) -> Decision:
        # The busy workers' ages are a view, read as needed: keep them as they are now.
        self.observations.append(replace(obs, gpu_busy_ages_s=tuple(obs.gpu_busy_ages_s)))
        n, self.n = min(self.n, obs.backlog), 0
        if self.greedy:
            n = obs.backlog
        wake, self.wake_at = self.wake_at, None
        return Decision(n, wake)

    def interval_s(self) -> float:
        return 0.0


def run_with(sc: Scenario, policy: Recorder) -> Any:
    return Simulation(sc, "recorder", lambda clock: policy).run()


@pytest.mark.parametrize(("running", "each_s"), [(2, 10.0), (4, 20.0)], ids=["fits", "contended"])
def test_cpu_contention_stretches_synthesis(running: int, each_s: float) -> None:
    # 8 cores, 4 threads per synthesis: 2 run at full speed, 4 share the cores at half speed.
    rec = Recorder(running)
    run_with(scenario(jobs__partitions_per_job=running), rec)
    assert rec.synthesis == pytest.approx([each_s] * running)


def test_a_policys_own_synthesis_workers_run_at_most_that_many() -> None:
    # Cores for all four, but two workers: two syntheses run 0-10 s, the other two wait for
    # them holding their memory, then run 10-20 s. One GPU worker: done at 22 s.
    rec = Recorder(4)
    rec.synthesis_workers = 2
    raw = run_with(scenario(synthesis__cores=64), rec)
    assert rec.synthesis == pytest.approx([10.0, 10.0, 20.0, 20.0])  # each from its dispatch
    assert (raw.peak_inflight, max(raw.trace.synthesizing)) == (4, 4)
    assert raw.end_s == pytest.approx(22.0)


def test_an_executors_processes_take_what_reaches_them_in_order() -> None:
    # Two processes, a 0.5 s hand-off: the four dispatched at 0 reach the processes at 0.5;
    # two run 0.5-10.5 s, the other two wait for them and run 10.5-20.5 s. All four count as
    # synthesizing from their dispatch, and are timed from it, as the service times them.
    rec = Recorder(4)
    executor = {"processes": 2, "handoff_s": 0.5}
    sc = scenario(synthesis__cores=64, synthesis__executor=executor)
    raw = run_with(sc, rec)
    assert rec.synthesis == pytest.approx([10.5, 10.5, 20.5, 20.5])
    assert (raw.trace.t[1], raw.trace.synthesizing[1]) == (0.0, 4)
    assert sc.synthesis_slots == 2
    assert raw.end_s == pytest.approx(22.5)


def test_a_dispatch_after_a_synthesis_ends_leaves_its_process_idle_for_the_hand_off() -> None:
    # One process, a 1 s hand-off, and a policy that dispatches one partition whenever none
    # is synthesizing: each synthesis starts 1 s after the last one ended.
    class OneAtATime(Recorder):
        def decide(self, obs: Observation) -> Decision:
            return Decision(1 if obs.synthesizing == 0 and obs.backlog else 0, None)

    rec = OneAtATime(0)
    executor = {"processes": 1, "handoff_s": 1.0}
    raw = run_with(scenario(synthesis__cores=64, synthesis__executor=executor), rec)
    assert raw.end_s == pytest.approx(4 * 11.0 + 1.0)


def test_gpu_phase_scales_service_time() -> None:
    rec = Recorder(4)
    sc = scenario(gpu={"workers": 1, "service_s": {"dist": "fixed", "value": 1.0},
                       "phases": [{"at_s": 11.5, "scale": 3.0}]},
                  synthesis__cores=64)  # fmt: skip
    run_with(sc, rec)
    # All ready at 10 s; GPU starts at 10, 11 (scale 1), 12, 15 (scale 3).
    assert rec.gpu == pytest.approx([1.0, 1.0, 3.0, 3.0])


def test_memory_budget_bounds_unpaced_and_is_counted() -> None:
    sc = scenario(memory__budget_bytes=3, jobs__partitions_per_job=10)
    raw = Simulation(sc, "unpaced", lambda clock: Unpaced(sc.memory_slots)).run()
    assert (raw.peak_inflight, raw.budget_violations, raw.completed) == (3, 0, 10)
    # A policy that asks for 5 at once: as in the pipeline, the budget lets 3 start and
    # refuses 2, which stay in the backlog and count as violations. The policy saw the room.
    over = Recorder(5)
    raw = run_with(sc, over)
    assert (raw.peak_inflight, raw.budget_violations, raw.completed) == (3, 2, 3)
    assert [o.budget_free for o in over.observations[:2]] == [3, 0]


def test_pi_asks_only_for_what_the_budget_holds_when_partitions_outgrow_the_caps() -> None:
    # Caps sized for partitions half as large as they are (as when a job's partitions are
    # larger than the size configured): 20 in flight by the caps, 10 by the budget. The
    # controller sees the budget's room and asks for nothing it refuses; every partition
    # that frees its bytes makes room for the next at once, so the budget stays full.
    sc = scenario(gpu__workers=2, synthesis__cores=64, partition={"bytes": 2},
                  memory={"budget_bytes": 20}, jobs__partitions_per_job=200)  # fmt: skip
    caps = Caps(synthesis_concurrency=16, inflight_partitions=20)
    pi = Simulation(sc, "pi", lambda clock: build_policy("pi", ControllerSettings(), caps, clock))
    raw = pi.run()
    report = summarize(raw)
    assert (raw.budget_violations, raw.peak_inflight, raw.completed) == (0, 10, 200)
    assert report.mean_inflight_partitions > 9.8  # full but for the start and the end


def test_runs_are_deterministic_and_policies_see_the_same_partitions() -> None:
    sc = scenario(
        gpu__service_s={"dist": "lognormal", "median": 1.0, "sigma": 0.3},
        synthesis__duration_s={"dist": "uniform", "low": 5.0, "high": 15.0},
        jobs__partitions_per_job=20,
    )
    a = Simulation(sc, "a", lambda c: Unpaced(sc.memory_slots))
    b = Simulation(sc, "b", lambda c: FixedConcurrency(3, sc.memory_slots))
    assert list(a._gpu_base) == list(b._gpu_base)
    assert list(a._syn_work) == list(b._syn_work)
    first = run_policy(sc, "pi", Settings())[1]
    assert run_policy(sc, "pi", Settings())[1] == first


def test_report_measures_a_known_run() -> None:
    # 1 worker, 1 s GPU work, syntheses of 10 s on cores for 4: 4 partitions dispatched at once
    # are ready at 10 s and keep the GPU busy until 14 s. Work was available 0..14 s, busy 4.
    sc = scenario(synthesis__cores=16)
    report = run_policy(sc, "unpaced", Settings())[1]
    assert report.partitions_completed == 4
    assert report.simulated_s == pytest.approx(14.0)
    assert report.gpu_busy_ratio == pytest.approx(4 / 14)
    assert report.time_to_first_gpu_s == pytest.approx(10.0)
    assert report.throughput_partitions_per_s == pytest.approx(4 / 14)
    assert report.idle_gap_p99_s == 0.0
    assert report.peak_inflight_partitions == 4
    assert report.bottleneck == "synthesis"  # 4 slots ÷ 10 s = 0.4/s < 1/s GPU


def test_idle_gaps_count_only_while_work_is_waiting() -> None:
    # Two Poisson jobs far apart: the idle time between them is not a gap.
    sc = scenario(
        jobs={
            "partitions_per_job": 2,
            "arrival": {"kind": "poisson", "jobs_per_hour": 2, "jobs": 2},
        },
        synthesis__cores=64,
        duration_s=100000,
    )
    report = run_policy(sc, "unpaced", Settings())[1]
    assert report.partitions_completed == 4
    # Each job: both partitions ready 10 s after arrival, served back to back; the only gap
    # spans the quiet period, and only the 10 s of the second job's synthesis count.
    assert report.idle_gap_p99_s == pytest.approx(10.0, rel=0.02)


def test_virtual_clock_is_driven_by_events() -> None:
    clock = VirtualClock()
    assert clock() == 0.0
    clock.now = 12.5
    assert clock() == 12.5


def test_a_stall_holds_the_partition_on_the_gpu_and_counts_in_its_time() -> None:
    rec = Recorder(3)
    sc = scenario(gpu={"workers": 1, "service_s": {"dist": "fixed", "value": 1.0},
                       "stalls": [{"at_s": 10.5, "duration_s": 5.0}]},
                  synthesis__cores=64, jobs__partitions_per_job=3)  # fmt: skip
    run_with(sc, rec)
    # All ready at 10 s; the first partition is on the GPU through the stall: 10 to 16 s.
    assert rec.gpu == pytest.approx([6.0, 1.0, 1.0])


def test_a_dead_worker_hands_its_partition_back_and_leaves_the_count() -> None:
    rec = Recorder(4)
    sc = scenario(gpu={"workers": 2, "service_s": {"dist": "fixed", "value": 1.0},
                       "deaths": [{"at_s": 10.5, "worker": 0}]},
                  synthesis__cores=64)  # fmt: skip
    raw = run_with(sc, rec)
    # At 10 s both workers take one; worker 0 dies at 10.5 s and its partition goes back to
    # the front of the ready queue; worker 1 proves the other three, one a second.
    assert (raw.completed, raw.end_s) == (4, pytest.approx(14.0))
    assert rec.gpu == pytest.approx([1.0] * 4)
    assert [o.gpu_workers for o in rec.observations if o.gpu_busy == 0][-1] == 1
    assert raw.trace.workers[-1] == 1


def test_a_cpu_slowdown_stretches_the_synthesis_in_progress() -> None:
    rec = Recorder(1)
    sc = scenario(synthesis={"duration_s": {"dist": "fixed", "value": 10.0},
                             "threads_per_synthesis": 4, "cores": 8,
                             "phases": [{"at_s": 5.0, "scale": 5.0}]},
                  jobs__partitions_per_job=1)  # fmt: skip
    run_with(sc, rec)
    assert rec.synthesis == pytest.approx([5.0 + 5.0 * 5.0])  # half done, the rest 5x slower


def test_a_failed_synthesis_is_reported_and_its_partition_retried() -> None:
    rec = Recorder(2, greedy=True)
    sc = scenario(synthesis={"duration_s": {"dist": "fixed", "value": 10.0},
                             "threads_per_synthesis": 1, "cores": 8,
                             "failures": [{"at_s": 4.0}]},
                  jobs__partitions_per_job=2)  # fmt: skip
    raw = run_with(sc, rec)
    assert rec.failures == pytest.approx([4.0])
    assert rec.synthesis == pytest.approx([10.0, 10.0])  # one at 10 s, the retry at 14 s
    assert (raw.completed, raw.end_s) == (2, pytest.approx(15.0))


def test_bursts_of_jobs_and_work_scales_per_job() -> None:
    sc = scenario(jobs={"partitions_per_job": 1, "work_scales": [1.0, 3.0],
                        "arrival": {"kind": "bursts", "jobs": 4, "per_burst": 2,
                                    "every_s": 100.0}})  # fmt: skip
    sim = Simulation(sc, "unpaced", lambda clock: Unpaced(sc.memory_slots))
    assert sim._arrivals == [0.0, 0.0, 100.0, 100.0]
    assert list(sim._syn_work) == [10.0, 30.0, 10.0, 30.0]
    assert list(sim._gpu_base) == [1.0, 3.0, 1.0, 3.0]


def test_observations_carry_the_oldest_synthesis_and_the_gpu_ages() -> None:
    rec = Recorder(1, wake_at=4.0)
    sc = scenario(synthesis__cores=64, jobs__partitions_per_job=1)
    run_with(sc, rec)
    woken = next(o for o in rec.observations if o.synthesizing == 1 and o.gpu_busy == 0
                 and o.synthesis_ages_s)  # fmt: skip
    assert woken.synthesis_ages_s == pytest.approx((4.0,))
    assert woken.oldest_synthesis_age_s == pytest.approx(4.0)
    on_gpu = next(o for o in rec.observations if o.gpu_busy == 1)
    assert on_gpu.gpu_busy_ages_s == (0.0,)


def test_a_replay_runs_its_jobs_and_durations_instead_of_the_draws() -> None:
    # Jobs of 2 and 1 partitions at 0 and 50 s; the scenario's own draws (10 s, 1 s) unused.
    replay = Replay((0.0, 50.0), (2, 1), np.array([1.0, 2.0, 3.0]), np.array([0.5, 0.25, 4.0]))
    sc = scenario(synthesis__cores=8)
    sim = Simulation(sc, "unpaced", lambda clock: Unpaced(sc.memory_slots), replay)
    raw = sim.run()
    assert raw.completed == 3
    assert raw.end_s == pytest.approx(50.0 + 3.0 + 4.0)
    assert raw.trace.backlog[0] == 0  # unpaced: nothing waits for dispatch
    with pytest.raises(ValueError, match="increasing order"):
        Replay((5.0, 0.0), (1, 1), np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="3 durations"):
        Replay((0.0,), (3,), np.ones(2), np.ones(3))


def test_a_hung_synthesis_holds_its_memory_until_its_timeout() -> None:
    rec = Recorder(2, greedy=True)
    sc = scenario(synthesis={"duration_s": {"dist": "fixed", "value": 10.0},
                             "threads_per_synthesis": 1, "cores": 8,
                             "hangs": [{"at_s": 0.0, "fails_after_s": 50.0}]},
                  jobs__partitions_per_job=2)  # fmt: skip
    raw = run_with(sc, rec)
    # The first dispatched hangs: it holds its memory and stays the oldest synthesis running
    # until it times out at 50 s; its partition is retried and done at 61 s.
    assert rec.failures == pytest.approx([50.0])
    assert rec.synthesis == pytest.approx([10.0, 10.0])
    held = next(o for o in rec.observations if o.ready == 0 and o.gpu_busy == 0 and o.backlog == 0
                and o.synthesizing == 1)  # fmt: skip
    assert held.synthesis_ages_s[0] >= 11.0  # the hung one, still synthesizing at 11 s
    assert (raw.completed, raw.end_s, raw.peak_inflight) == (2, pytest.approx(61.0), 2)


def test_the_workers_of_an_outage_hand_back_their_partition_and_return() -> None:
    rec = Recorder(4)
    sc = scenario(gpu={"workers": 2, "service_s": {"dist": "fixed", "value": 1.0},
                       "outages": [{"at_s": 10.5, "duration_s": 2.0, "workers": [0]}]},
                  synthesis__cores=64)  # fmt: skip
    raw = run_with(sc, rec)
    # At 10 s both workers take one; worker 0 leaves at 10.5 s (its partition back to the
    # front of the ready queue; its end, due at 11 s, is stale and ignored). Worker 1 proves
    # it 11-12 s and the third 12-13 s; worker 0 returns at 12.5 s and takes the fourth.
    assert rec.gpu == pytest.approx([1.0] * 4)
    assert (raw.completed, raw.end_s) == (4, pytest.approx(13.5))
    assert (min(raw.trace.workers), raw.trace.workers[-1]) == (1, 2)
    assert (sc.gpu.live_at(11.0), sc.gpu.live_at(13.0)) == (1, 2)
    assert sc.disturbances() == [10.5, 12.5]


def test_partition_work_multiplies_each_partition_by_a_draw() -> None:
    sc = scenario(jobs={"partitions_per_job": 400, "arrival": {"kind": "backlog", "jobs": 1},
                        "partition_work": {"dist": "choice", "values": [1.0, 4.0],
                                           "weights": [3.0, 1.0]}})  # fmt: skip
    sim = Simulation(sc, "unpaced", lambda clock: Unpaced(sc.memory_slots))
    assert set(sim._syn_work) == {10.0, 40.0}
    assert list(sim._gpu_base / sim._syn_work) == pytest.approx([0.1] * 400)  # same draw
    assert sum(sim._syn_work == 40.0) == pytest.approx(100, abs=30)
    assert sc.jobs.mean_work_scale == pytest.approx(1.75)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        (
            {
                "gpu": {
                    "workers": 2,
                    "service_s": {"dist": "fixed", "value": 1.0},
                    "outages": [{"at_s": 1.0, "duration_s": 1.0, "workers": [2]}],
                }
            },
            "outages: worker must be below workers (2)",
        ),
        (
            {
                "gpu": {
                    "workers": 2,
                    "service_s": {"dist": "fixed", "value": 1.0},
                    "outages": [
                        {"at_s": 1.0, "duration_s": 5.0, "workers": [0]},
                        {"at_s": 3.0, "duration_s": 5.0, "workers": [0, 1]},
                    ],
                }
            },
            "outages: worker 0's outages must not overlap",
        ),
        (
            {
                "jobs": {
                    "partitions_per_job": 1,
                    "arrival": {"kind": "backlog", "jobs": 1},
                    "partition_work": {"dist": "choice", "values": [1.0, 2.0], "weights": [1.0]},
                }
            },
            "weights (1) must be as many as values (2)",
        ),
        (
            {
                "synthesis": {
                    "duration_s": {"dist": "fixed", "value": 1.0},
                    "threads_per_synthesis": 1,
                    "cores": 1,
                    "hangs": [{"at_s": 5.0}, {"at_s": 1.0}],
                }
            },
            "hangs must be listed in increasing at_s",
        ),
    ],
    ids=["outage-worker", "outages-overlap", "choice-weights", "hangs-order"],
)
def test_a_scenario_that_breaks_a_rule_says_which(over: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        scenario(**over)
