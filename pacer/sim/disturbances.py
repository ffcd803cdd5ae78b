"""What a scenario makes happen to its host (``pacer.sim.scenario``): changes of speed, GPU
stalls, deaths and outages, synthesis failures and hangs."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from pacer.sim.distributions import Strict


class Phase(Strict):
    at_s: float = Field(ge=0)
    scale: float = Field(gt=0)


def scale_at(phases: tuple[Phase, ...], t: float) -> float:
    scale = 1.0
    for phase in phases:
        if phase.at_s <= t:
            scale = phase.scale
    return scale


def sorted_phases(phases: tuple[Phase, ...]) -> None:
    times = [p.at_s for p in phases]
    if times != sorted(times):
        raise ValueError("phases must be listed in increasing at_s")


class Stall(Strict):
    """Every GPU worker makes no progress from ``at_s`` for ``duration_s``: the partitions on
    them take that much longer (and report it as their GPU time)."""

    at_s: float = Field(ge=0)
    duration_s: float = Field(gt=0)


def stalled_finish(stalls: list[tuple[float, float]], start: float, work: float) -> float:
    """When GPU work of ``work`` seconds started at ``start`` ends, where the GPUs make no
    progress over ``stalls`` ((from, until) in s, in order of their start).

    >>> stalled_finish([(2.0, 5.0)], 1.0, 2.0)  # 1 s, the stall, then the last second
    6.0
    """
    t, left = start, work
    for stall_from, stall_to in stalls:
        if stall_to <= t:
            continue
        if stall_from >= t + left:
            break
        if stall_from > t:
            left -= stall_from - t
        t = stall_to
    return t + left


class Death(Strict):
    """GPU worker ``worker`` dies at ``at_s``: it takes no more work, and the partition it
    held goes back to the front of the ready queue (a retry on another worker)."""

    at_s: float = Field(ge=0)
    worker: int = Field(ge=0)


class Outage(Strict):
    """GPU workers ``workers`` (a GPU's, say) leave at ``at_s`` for ``duration_s``: their
    partitions go back to the front of the ready queue, as at a death, and the workers take
    work again when they return."""

    at_s: float = Field(ge=0)
    duration_s: float = Field(gt=0)
    workers: tuple[Annotated[int, Field(ge=0)], ...] = Field(min_length=1)


class SynthesisFailure(Strict):
    """At ``at_s`` the oldest synthesis running fails: its memory is freed, the policy is
    told (``observe_synthesis_failure``) and the partition goes back to the backlog."""

    at_s: float = Field(ge=0)


class Hang(Strict):
    """The first synthesis dispatched at or after ``at_s`` hangs: it makes no progress and
    holds its memory, but computes on no core (with an executor it holds its process). After
    ``fails_after_s`` (a watchdog's timeout) it fails, is reported as a failure and its
    partition goes back to the backlog; unset: it hangs to the end."""

    at_s: float = Field(ge=0)
    fails_after_s: float | None = Field(None, gt=0)
