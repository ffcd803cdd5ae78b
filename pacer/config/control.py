"""The dispatch policy's settings: which policy, and the PI controller's gains, setpoint
and limits (``PACER_CONTROLLER__*``)."""

from __future__ import annotations

import math
from typing import Literal, Self

from pydantic import Field, model_validator

from pacer.config.section import Section


class ControllerSettings(Section):
    """The dispatch policy, and the gains, setpoint and limits of the PI controller."""

    policy: Literal["pi", "unpaced", "cuzk", "cuzk-default"] = Field(
        "pi",
        description="Dispatch policy: pi (the PI controller), or a baseline to compare it "
        "with: unpaced (dispatch whenever the memory budget allows), cuzk (the cuzk "
        "engine's dispatcher with its DispatchPacer at setpoint 8) or cuzk-default (the same "
        "dispatcher as shipped, pacer off) (pi/unpaced/cuzk/cuzk-default)",
    )
    target_ready: float = Field(
        8.0,
        gt=0,
        le=100_000,
        description="Least setpoint: partitions synthesized and waiting for a GPU, whatever "
        "target_ready_s comes to (partitions)",
    )
    target_ready_s: float = Field(
        0.0,
        ge=0,
        le=3600,
        description="Setpoint as a ready buffer of GPU work: this many seconds of it (GPU "
        "time ÷ workers per partition), so it scales with GPU speed and worker count; the "
        "setpoint is the larger of this and target_ready; 0: target_ready alone (s)",
    )
    kp: float = Field(
        4.0,
        ge=0,
        le=100,
        description="Proportional gain: the share of a projected shortfall (setpoint less the "
        "projected ready depth) refilled each synthesis lead time, above the feed-forward "
        "rate. Higher: a disturbance is refilled sooner, and more memory follows the noise of "
        "the estimates. Safe range 2-8 (below 2 the GPUs idle after a disturbance, and a wide "
        "spread of synthesis times costs busy time) (1/lead)",
    )
    ki: float = Field(
        0.1,
        ge=0,
        le=100,
        description="Integral gain: the share of a persistent error of the Smith-predicted "
        "ready depth (the projection corrected by what it got wrong a lead time earlier) "
        "removed each synthesis lead time; it brings the ready depth observed to the setpoint. "
        "Higher: a biased model is corrected sooner; where the model errs on the safe side it "
        "trims memory and a little busy time. Safe range 0-0.25: above, there is no more to "
        "remove and busy time falls (1/lead)",
    )
    integral_min: float = Field(
        -200.0,
        ge=-1e6,
        le=0,
        description="Lower clamp of the integral of the error over time in lead times "
        "(partition-leads)",
    )
    integral_max: float = Field(
        200.0,
        ge=0,
        le=1e6,
        description="Upper clamp of the integral of the error over time in lead times "
        "(partition-leads)",
    )
    multiplier_min: float = Field(
        0.001,
        ge=0.001,
        le=1,
        description="Lowest dispatch rate, as a multiple of the feed-forward rate (1)",
    )
    multiplier_max: float = Field(
        1000.0,
        ge=1,
        le=1000,
        description="Highest dispatch rate, as a multiple of the "
        "feed-forward rate; the synthesis caps bound it too (1)",
    )
    interval_min_s: float = Field(
        0.001,
        ge=1e-6,
        le=3600,
        description="Shortest wait between two dispatch decisions; dispatch runs by rate, so "
        "what falls due meanwhile goes out together and the rate is not capped by it (s)",
    )
    interval_max_s: float = Field(
        60.0,
        gt=0,
        le=86400,
        description="Longest interval between two dispatches while pacing (s)",
    )
    gpu_window: int = Field(
        64,
        ge=8,
        le=4096,
        description="GPU service time: the mean of this many latest samples (at least 8 per "
        "worker, and doubled until the mean is known within 5 % where the samples spread "
        "widely, as with partitions of several sizes), less the longest and shortest one "
        "per worker; a change of level in the newest quarter drops the older ones (samples)",
    )
    synthesis_window: int = Field(
        64,
        ge=8,
        le=4096,
        description="Synthesis duration: the mean and spread of this many latest samples, "
        "or of two lead times of them where that is more; a change of level in the newest "
        "quarter drops the older ones (samples)",
    )
    bootstrap_depth: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="Partitions dispatched on a cold start, before any duration is known; 0: "
        "every synthesis slot (the synthesis-concurrency cap), within 90 % of the memory cap "
        "(partitions)",
    )
    spread_sigmas: float = Field(
        2.5,
        ge=0,
        le=10,
        description="Raise the setpoint to this many standard deviations of the ready "
        "queue's wander, estimated from the spread of synthesis times; 0: off (1)",
    )
    near_balance_idle: float = Field(
        0.002,
        ge=0,
        le=0.5,
        description="Where the synthesis slots barely outpace the GPUs, raise the setpoint "
        "to the ready buffer that leaves the GPUs idle this share of the time as the ready "
        "queue wanders (the slots' surplus over the GPUs and the spread of both times decide "
        "it); where synthesis is the bottleneck, keep every slot busy. Lower: more memory, "
        "less idle time. 0: off (share)",
    )
    live_floor_longest: float = Field(
        0.0,
        ge=0,
        le=20,
        description="The live floor's margin, how far the oldest syntheses running outran "
        "the synthesis estimate lately, is taken over eight lead times, or over this many "
        "of the longest syntheses seen where that is longer. 0: eight lead times. Where "
        "synthesis times spread widely (a heavy tail, partitions of several sizes), 4 keeps "
        "the lead time from lifting on clusters of stragglers: less memory, a slowdown under "
        "the tail seen as soon, and less for kp and ki to move (longest syntheses)",
    )
    lost_gpu_hold_leads: float = Field(
        100.0,
        ge=0,
        le=1000,
        description="When GPU workers stop delivering (lost, or stalled on one partition), "
        "keep the pipeline their share of work filled for this many synthesis lead times, "
        "never more than was in flight before, so that a GPU that comes back finds "
        "partitions ready; then shrink to what the live workers need. Lower gives the memory "
        "of a GPU lost for good back sooner; a GPU back after the hold waits about a lead "
        "time for its refill. 0: shrink at once (lead times)",
    )
    rebootstrap_hold_s: float = Field(
        1.0,
        ge=0,
        le=3600,
        description="How long the pipeline must stay drained with work waiting before a "
        "re-bootstrap (s)",
    )

    def check_manual_interval(self, interval_s: object) -> None:
        """ValueError unless ``interval_s`` (s) may be a manual dispatch interval: from
        ``interval_min_s`` to ``interval_max_s``, the bounds of pacing's own. A longer one
        would stop dispatch while the service reads as ready.

        >>> ControllerSettings().check_manual_interval(1e300)
        Traceback (most recent call last):
        ValueError: manual_interval_s must be from interval_min_s (0.001 s) to interval_max_s (60 s), got 1e+300
        """  # noqa: E501 - a doctest's line
        if not (
            isinstance(interval_s, int | float)
            and not isinstance(interval_s, bool)
            and math.isfinite(interval_s)
            and self.interval_min_s <= interval_s <= self.interval_max_s
        ):
            raise ValueError(
                f"manual_interval_s must be from interval_min_s ({self.interval_min_s:g} s) to "
                f"interval_max_s ({self.interval_max_s:g} s), got {interval_s!r:.40}"
            )

    @model_validator(mode="after")
    def _limits_ordered(self) -> Self:
        if self.interval_min_s >= self.interval_max_s:
            raise ValueError(
                f"interval_min_s ({self.interval_min_s}) must be less than "
                f"interval_max_s ({self.interval_max_s})"
            )
        return self
