"""pi in the simulator, watched at every decision: for benchmarks that read its state as it runs."""

from __future__ import annotations

from collections.abc import Callable

from pacer.config import Settings
from pacer.control.controller import PIController
from pacer.control.policy import Decision, DispatchPolicy, Observation
from pacer.sim.engine import PolicyFactory, VirtualClock
from pacer.sim.policies import policy_factory
from pacer.sim.scenario import Scenario


def watched_pi(
    scenario: Scenario, settings: Settings, watch: Callable[[float, PIController], None]
) -> PolicyFactory:
    """A factory of pi for ``scenario`` under ``settings`` that calls ``watch(now, pi)`` after
    each of its decisions (``now`` in simulated s). The decisions are pi's own: the watch reads,
    and changes nothing."""
    factory = policy_factory("pi", scenario, settings)

    def make(clock: VirtualClock) -> DispatchPolicy:
        policy = factory(clock)
        assert isinstance(policy, PIController)
        decide = policy.decide

        def watched(obs: Observation) -> Decision:
            decision = decide(obs)
            watch(clock(), policy)
            return decision

        policy.decide = watched  # type: ignore[method-assign]  # this run's controller only
        return policy

    return make
