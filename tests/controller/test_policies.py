"""build_policy: every dispatch policy by name, for the service and the simulator alike."""

from __future__ import annotations

import pytest

from pacer.config import ControllerSettings, Settings
from pacer.control.baselines import CuzkPacer, FixedConcurrency, Unpaced
from pacer.control.controller import PIController
from pacer.control.estimates import Estimates
from pacer.control.policy import Caps, DispatchPolicy, Observation
from pacer.control.registry import POLICIES, build_policy
from pacer.sim.engine import VirtualClock
from pacer.sim.policies import policy_factory
from pacer.sim.scenario import load_scenario, shipped_scenarios
from tests.conftest import FakeClock

CAPS = Caps(synthesis_concurrency=6, inflight_partitions=10)
FULL = Observation(ready=0, synthesizing=0, gpu_busy=0, gpu_workers=1, backlog=1000)


def build(
    name: str, estimates: Estimates | None = None, concurrency: int | None = None
) -> DispatchPolicy:
    return build_policy(name, ControllerSettings(), CAPS, FakeClock(), estimates,
                        concurrency=concurrency)  # fmt: skip


@pytest.mark.parametrize(
    ("name", "kind", "synthesis_workers"),
    [
        ("pi", PIController, None),
        ("unpaced", Unpaced, None),
        ("cuzk", CuzkPacer, 6),  # the host's synthesis cap
        ("cuzk-default", CuzkPacer, 10),  # as shipped, 18, within the memory cap
    ],
    ids=["pi", "unpaced", "cuzk", "cuzk-default"],
)
def test_each_policy_is_built_within_the_caps(
    name: str, kind: type, synthesis_workers: int | None
) -> None:
    policy = build(name)
    assert isinstance(policy, kind)
    assert policy.synthesis_workers == synthesis_workers
    assert policy.decide(FULL).dispatch <= CAPS.inflight_partitions


def test_fixed_keeps_its_concurrency_and_needs_one() -> None:
    assert build("fixed", concurrency=3).decide(FULL).dispatch == 3
    assert isinstance(build("fixed", concurrency=3), FixedConcurrency)
    with pytest.raises(ValueError, match="policy fixed needs a concurrency"):
        build("fixed")


def test_an_unknown_policy_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="policy must be one of pi, cuzk, cuzk-default, unpaced"):
        build("pid")


def test_saved_estimates_warm_the_pi_controller() -> None:
    policy = build("pi", estimates=Estimates(0.1, 2.0))
    assert isinstance(policy, PIController)
    assert policy.estimates.gpu_service_s == 0.1


@pytest.mark.parametrize("name", POLICIES)
def test_the_simulator_builds_the_same_policies(name: str) -> None:
    scenario = load_scenario(next(p for p in shipped_scenarios() if p.stem == "steady-backlog"))
    policy = policy_factory(name, scenario, Settings())(VirtualClock())
    assert type(policy) is type(build(name, concurrency=3))
