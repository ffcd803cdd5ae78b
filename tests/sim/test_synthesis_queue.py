"""The bottleneck never idles: where synthesis bounds throughput, a process that ends finds its
next partition waiting, so pi proves as fast as a policy that queues everything."""

from __future__ import annotations

import pytest

from pacer.config import Settings
from pacer.control.controller import PIController
from pacer.control.policy import Caps
from pacer.sim.engine import PolicyFactory, Simulation
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
