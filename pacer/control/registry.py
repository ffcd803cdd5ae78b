"""Building a dispatch policy by name: the one factory the service and the simulator use.

- ``pi``: pacer's PI controller (`pacer.control.controller`), warm when given saved estimates.
- ``unpaced``: dispatch whenever the memory budget allows.
- ``cuzk``: the cuzk proving engine's dispatch loop and DispatchPacer (setpoint 8), with
  ``max_parallel_synthesis`` the host's synthesis-concurrency cap, the number ``pi``'s cap
  uses: cuzk as an operator would tune it for the host.
- ``cuzk-default``: the same loop as cuzk ships it: its pacer off (setpoint 0) and its default
  ``max_parallel_synthesis`` of 18.
- ``fixed``: a constant number of partitions in flight (the simulator's; it needs one).

Every one is bounded by the memory cap, as in the simulator.
"""

from __future__ import annotations

from collections.abc import Callable

from pacer.config import ControllerSettings
from pacer.control.baselines import CuzkPacer, FixedConcurrency, Unpaced
from pacer.control.controller import PIController
from pacer.control.estimates import Estimates
from pacer.control.policy import Caps, DispatchPolicy

POLICIES = ("pi", "cuzk", "cuzk-default", "unpaced", "fixed")


def build_policy(
    name: str,
    settings: ControllerSettings,
    caps: Caps,
    clock: Callable[[], float],
    estimates: Estimates | None = None,
    *,
    concurrency: int | None = None,
) -> DispatchPolicy:
    """Policy ``name`` (one of `POLICIES`) on ``clock`` within ``caps``: ``estimates`` warm
    the PI controller; ``concurrency`` is what ``fixed`` keeps in flight.

    >>> cuzk = build_policy("cuzk", ControllerSettings(), Caps(4, 10), lambda: 0.0)
    >>> type(cuzk).__name__, cuzk.synthesis_workers  # its workers: the synthesis cap
    ('CuzkPacer', 4)
    """
    slots = caps.inflight_partitions
    if name == "pi":
        return PIController(settings, caps, clock, estimates)
    if name == "cuzk":
        return CuzkPacer(slots, clock, max_parallel_synthesis=caps.synthesis_concurrency)
    if name == "cuzk-default":
        return CuzkPacer(slots, clock, target=0)
    if name == "unpaced":
        return Unpaced(slots)
    if name == "fixed":
        if concurrency is None:
            raise ValueError("policy fixed needs a concurrency (partitions in flight)")
        return FixedConcurrency(concurrency, slots)
    raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {name!r}")
