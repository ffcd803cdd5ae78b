"""The dispatch policies the simulator compares (`pacer.control.registry.POLICIES`), on a scenario.

The policies themselves are built by `pacer.control.registry.build_policy`, as the service builds
them; here they get the scenario's host (its caps), the scenario's warm start (``pi``), and
for ``fixed`` a constant in flight: ``--concurrency``, by default the scenario's Little's-law
minimum plus the target ready depth (a static policy tuned with knowledge of the scenario that
a live system does not have).
"""

from __future__ import annotations

import math

from pacer.config import Settings
from pacer.control.estimates import Estimates
from pacer.control.policy import Caps
from pacer.control.registry import POLICIES, build_policy
from pacer.sim.engine import PolicyFactory
from pacer.sim.scenario import Scenario

__all__ = ["POLICIES", "default_fixed_concurrency", "policy_factory"]


def policy_factory(
    name: str, scenario: Scenario, settings: Settings, concurrency: int | None = None
) -> PolicyFactory:
    """A constructor of policy ``name`` for ``scenario`` on the simulation's clock."""
    if name not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {name!r}")
    caps = Caps.from_host(
        cores=scenario.synthesis.cores,
        threads_per_synthesis=scenario.synthesis.threads_per_synthesis,
        max_concurrent=settings.synthesis.max_concurrent,
        budget_bytes=scenario.memory.budget_bytes,
        partition_bytes=scenario.partition.bytes,
        synthesis_queue=scenario.synthesis.executor is not None,
    )
    warm = scenario.warm_start
    saved = None if warm is None else Estimates(
        warm.gpu_service_s, warm.synthesis_s, warm.synthesis_sd_s
    )  # fmt: skip
    if name == "fixed":
        concurrency = concurrency or default_fixed_concurrency(scenario, settings)
    return lambda clock: build_policy(name, settings.controller, caps, clock, saved,
                                      concurrency=concurrency)  # fmt: skip


def default_fixed_concurrency(scenario: Scenario, settings: Settings) -> int:
    """ceil(Little's-law minimum in flight + target ready depth)."""
    return math.ceil(scenario.little_min_inflight + settings.controller.target_ready)
