"""The bottleneck never idles: where synthesis bounds throughput, a process that ends finds its
next partition waiting, so pi proves as fast as a policy that queues everything."""

from __future__ import annotations

import pytest

from bench.handoff import UnmeasuredPI, slow_handoff_host, time_average
from bench.near_balance import host
from pacer.config import Settings
from pacer.control.controller import PIController
from pacer.control.policy import Caps
from pacer.sim.engine import PolicyFactory, RawRun, Simulation
from pacer.sim.policies import policy_factory
from pacer.sim.report import Report, summarize
from pacer.sim.scenario import Scenario, load_scenario, scenario_path


def processes_host(handoff_s: float, seed: int) -> Scenario:
    """The shipped synthesis-processes host, shortened to 60 s, with ``handoff_s``."""
    sc = load_scenario(scenario_path("synthesis-processes"))
    assert sc.synthesis.executor is not None
    synthesis = sc.synthesis.model_copy(
        update={"executor": sc.synthesis.executor.model_copy(update={"handoff_s": handoff_s})}
    )
    return sc.model_copy(update={"duration_s": 60.0, "seed": seed, "synthesis": synthesis})


def pi_without_queue(sc: Scenario, settings: Settings) -> PolicyFactory:
    caps = Caps.from_host(
        cores=sc.synthesis.cores, threads_per_synthesis=sc.synthesis.threads_per_synthesis,
        max_concurrent=None, budget_bytes=sc.memory.budget_bytes,
        partition_bytes=sc.partition.bytes, synthesis_queue=True,
    )  # fmt: skip
    return lambda clock: PIController(settings.controller, caps, clock, queue_sigmas=0)


def throughputs(sc: Scenario) -> dict[str, Report]:
    settings = Settings()
    factories = {
        "pi without a queue": pi_without_queue(sc, settings),
        "pi": policy_factory("pi", sc, settings),
        "unpaced": policy_factory("unpaced", sc, settings),
    }
    return {name: summarize(Simulation(sc, name, f).run()) for name, f in factories.items()}


@pytest.mark.parametrize("seed", [41, 42])
def test_a_queue_in_front_of_the_processes_closes_the_hand_off_gap(seed: int) -> None:
    runs = throughputs(processes_host(0.05, seed))
    unpaced = runs["unpaced"].throughput_partitions_per_s
    # Without a queue each process idles 50 ms a synthesis of about 1.4 s: 3 % lost.
    assert runs["pi without a queue"].throughput_partitions_per_s < 0.98 * unpaced
    assert runs["pi"].throughput_partitions_per_s >= 0.998 * unpaced
    # ... holding no more memory than unpaced does.
    assert runs["pi"].mean_inflight_partitions <= runs["unpaced"].mean_inflight_partitions


def test_without_a_hand_off_there_is_no_gap_to_close() -> None:
    runs = throughputs(processes_host(0.0, 41))
    unpaced = runs["unpaced"].throughput_partitions_per_s
    assert runs["pi without a queue"].throughput_partitions_per_s >= 0.998 * unpaced


def pi_counting_no_bunched_ends(sc: Scenario, settings: Settings) -> PolicyFactory:
    """pi whose synthesis rate cap counts the concurrency cap alone, as before D193."""
    caps = Caps.from_host(
        cores=sc.synthesis.cores, threads_per_synthesis=sc.synthesis.threads_per_synthesis,
        max_concurrent=None, budget_bytes=sc.memory.budget_bytes,
        partition_bytes=sc.partition.bytes,
    )  # fmt: skip
    return lambda clock: PIController(settings.controller, caps, clock, queue_sigmas=0)


def mean_synthesizing(run: RawRun, after_s: float) -> float:
    """Syntheses running, time-averaged from ``after_s`` to the end."""
    return time_average(run, run.trace.synthesizing, after_s)


@pytest.mark.slow
def test_where_heavy_tailed_syntheses_share_the_cores_every_slot_stays_busy() -> None:
    # σ 1.3 on 32 cores: the slots finish 9.8 partitions a second of the GPUs' 12.5. Their
    # ends bunch up, and slots freed together must not wait for the rate cap's tokens.
    sc = host(1.3, 0.8, 0)
    settings = Settings()
    factories = {
        "pi": policy_factory("pi", sc, settings),
        "before": pi_counting_no_bunched_ends(sc, settings),
    }
    runs = {name: Simulation(sc, name, f).run() for name, f in factories.items()}
    slots = sc.synthesis.cores
    assert mean_synthesizing(runs["pi"], 60.0) >= slots - 0.1
    assert mean_synthesizing(runs["before"], 60.0) <= slots - 0.5
    assert runs["pi"].completed >= 1.02 * runs["before"].completed


@pytest.mark.slow
@pytest.mark.parametrize(("handoff_s", "seed"), [(0.3, 41), (0.6, 42)])
def test_a_hand_off_longer_than_the_gap_between_ends_is_covered_by_the_queue(
    handoff_s: float, seed: int
) -> None:
    # 8 ends a second and a hand-off of 0.3 s keep 2.4 partitions on their way. Counted in
    # T̂syn, the hand-off also held the rate cap below the processes' rate.
    sc = slow_handoff_host(handoff_s, seed)
    settings = Settings()
    caps = Caps.from_host(
        cores=8, threads_per_synthesis=1, max_concurrent=None,
        budget_bytes=sc.memory.budget_bytes, partition_bytes=sc.partition.bytes,
        synthesis_queue=True,
    )  # fmt: skip
    factories = {
        "pi": policy_factory("pi", sc, settings),
        "before": lambda clock: UnmeasuredPI(settings.controller, caps, clock),
        "unpaced": policy_factory("unpaced", sc, settings),
    }
    runs = {name: Simulation(sc, name, f).run() for name, f in factories.items()}
    busy = {
        name: time_average(run, run.trace.busy, 60.0) / sc.gpu.workers for name, run in runs.items()
    }
    assert busy["before"] < busy["unpaced"] - 0.02  # 8 processes keep 2 GPU workers 0.64 busy
    assert busy["pi"] >= busy["unpaced"] - 0.005
    memory = {name: time_average(run, run.trace.inflight, 60.0) for name, run in runs.items()}
    assert memory["pi"] <= 0.8 * memory["unpaced"]
