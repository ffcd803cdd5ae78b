"""Dispatch policies the simulator compares: ``pi`` (pacer's controller) and four baselines.

- ``unpaced``: dispatch whenever the memory budget allows.
- ``fixed``: keep a constant number of partitions in flight (``--concurrency``; by default the
  scenario's Little's-law minimum plus the target ready depth: a static policy tuned with
  knowledge of the scenario that a live system does not have).
- ``cuzk``: the cuzk proving engine's dispatch loop and DispatchPacer (setpoint 8), ported from
  its source (see ``CuzkPacer``): the reference to beat.
- ``cuzk-default``: the same loop as cuzk ships it: its pacer off (setpoint 0) and its default
  ``max_parallel_synthesis`` of 18.

``cuzk`` is cuzk as an operator would tune it for the host: its recommended setpoint and
``max_parallel_synthesis`` = the host's synthesis-concurrency cap, the number ``pi``'s cap uses.

The baselines themselves live in ``pacer.baselines``, where the service finds them too.
"""

from __future__ import annotations

import math

from pacer.baselines import CuzkPacer, FixedConcurrency, Unpaced
from pacer.config import Settings
from pacer.controller import PIController
from pacer.estimates import Estimates
from pacer.policy import Caps
from pacer.sim.engine import PolicyFactory
from pacer.sim.scenario import Scenario

POLICIES = ("pi", "cuzk", "cuzk-default", "unpaced", "fixed")


def policy_factory(
    name: str, scenario: Scenario, settings: Settings, concurrency: int | None = None
) -> PolicyFactory:
    """A constructor of policy ``name`` for ``scenario`` on the simulation's clock."""
    slots = scenario.memory_slots
    caps = Caps.from_host(
        cores=scenario.synthesis.cores,
        threads_per_synthesis=scenario.synthesis.threads_per_synthesis,
        max_concurrent=settings.synthesis.max_concurrent,
        budget_bytes=scenario.memory.budget_bytes,
        partition_bytes=scenario.partition.bytes,
    )
    if name == "pi":
        warm = scenario.warm_start
        saved = None if warm is None else Estimates(
            warm.gpu_service_s, warm.synthesis_s, warm.synthesis_sd_s
        )  # fmt: skip
        return lambda clock: PIController(settings.controller, caps, clock, saved)
    if name == "cuzk":  # max_parallel_synthesis set for the host, to the number pi's cap uses
        workers = caps.synthesis_concurrency
        return lambda clock: CuzkPacer(slots, clock, max_parallel_synthesis=workers)
    if name == "cuzk-default":  # as shipped: pacer off, its default 18 synthesis workers
        return lambda clock: CuzkPacer(slots, clock, target=0)
    if name == "unpaced":
        return lambda clock: Unpaced(slots)
    if name == "fixed":
        n = concurrency or default_fixed_concurrency(scenario, settings)
        return lambda clock: FixedConcurrency(n, slots)
    raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {name!r}")


def default_fixed_concurrency(scenario: Scenario, settings: Settings) -> int:
    """ceil(Little's-law minimum in flight + target ready depth)."""
    return math.ceil(scenario.little_min_inflight + settings.controller.target_ready)
