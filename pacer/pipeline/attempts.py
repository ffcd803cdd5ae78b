"""Attempts of a partition: each call's time limit, what a valid proof is, and when to retry.

Pure: no clock, no threads. The pipeline asks `CallLimits` how long a call may run. The service
asks `RetrySchedule` how long to wait before the next attempt, or whether the job has failed.

A derived limit is max(floor, multiple × the controller's estimate of the call). A cold start
has no estimate and gets the floor. Verification scales with the synthesis estimate
(docs/decisions/hangs.md, D55).

>>> from pacer.config import TimeoutSettings
>>> limits = CallLimits(TimeoutSettings(), lambda: Estimates(gpu_service_s=40.0, synthesis_s=2.0))
>>> limits.limit_s("prove"), limits.limit_s("synthesis")
(400.0, 600.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

from pacer.config import RetrySettings, TimeoutSettings
from pacer.control.estimates import Estimates
from pacer.workload import Proof

Call = Literal["synthesis", "prove", "verify"]
CALLS: tuple[Call, ...] = ("synthesis", "prove", "verify")


def seconds_text(seconds: float) -> str:
    """A limit as an operator wrote it: ``300.0`` → ``"300"``, ``0.25`` → ``"0.25"``."""
    return f"{seconds:.3f}".rstrip("0").rstrip(".")


class CallTimedOut(TimeoutError):  # noqa: N818 - a domain name, like UnknownJob
    """A workload call ran past its limit and was abandoned (its thread left to finish)."""

    def __init__(self, call: Call, limit_s: float, job_id: str, index: int) -> None:
        super().__init__(f"{call} timed out after {seconds_text(limit_s)} s")
        self.call = call
        self.limit_s = limit_s
        self.job_id = job_id
        self.index = index


class CallLimits:
    """The time limit of each workload call, in seconds.

    Limits come from ``settings`` and the callable ``estimates``, which returns None under a
    baseline policy.
    """

    def __init__(
        self,
        settings: TimeoutSettings,
        estimates: Callable[[], Estimates | None] = lambda: None,
    ) -> None:
        self.settings = settings
        self._estimates = estimates

    def limit_s(self, call: Call) -> float:
        s = self.settings
        configured, floor = {
            "synthesis": (s.synthesis_s, s.synthesis_floor_s),
            "prove": (s.prove_s, s.prove_floor_s),
            "verify": (s.verify_s, s.verify_floor_s),
        }[call]
        if configured > 0:
            return configured
        estimate = self.estimate_s(call)
        return floor if estimate is None else max(floor, s.estimate_multiple * estimate)

    def estimate_s(self, call: Call) -> float | None:
        """The controller's estimate (s) that a derived limit of ``call`` scales, if any."""
        est = self._estimates()
        if est is None:
            return None
        value = est.gpu_service_s if call == "prove" else est.synthesis_s
        return value if value is not None and math.isfinite(value) else None

    def limits(self) -> dict[str, float]:
        """Every call's limit now (s), for status."""
        return {call: self.limit_s(call) for call in CALLS}

    def shortest_s(self) -> float:
        return min(self.limit_s(call) for call in CALLS)


class RetrySchedule:
    """When a partition whose attempt failed is tried again, and when its job fails.

    >>> schedule = RetrySchedule(RetrySettings(max=4, backoff_s=1, backoff_max_s=3))
    >>> [schedule.delay_s(failed) for failed in (1, 2, 3)], schedule.gives_up(4)
    ([1.0, 2.0, 3.0], True)
    """

    def __init__(self, settings: RetrySettings) -> None:
        self.settings = settings

    @property
    def max_attempts(self) -> int:
        return self.settings.max

    def gives_up(self, failed: int) -> bool:
        """Whether the partition, and so its job, has failed after ``failed`` failed attempts."""
        return failed >= self.settings.max

    def delay_s(self, failed: int) -> float:
        """Seconds to wait after ``failed`` failed attempts: the base, doubling, capped."""
        if failed < 1:
            raise ValueError(f"failed must be at least 1, got {failed}")
        s = self.settings
        # 2**60 is far past any cap; a larger power would only overflow the float.
        return float(min(s.backoff_max_s, s.backoff_s * 2 ** min(failed - 1, 60)))


def proof_problem(proof: Any) -> str | None:
    """What makes ``proof`` unfit to journal, or None.

    A fit proof has a non-empty digest without whitespace, and its phases are finite seconds >= 0.
    """
    if not isinstance(proof, Proof):
        return f"proving returned {type(proof).__name__}, not a Proof"
    digest = proof.digest
    if not isinstance(digest, str) or digest.split() != [digest]:  # empty, or whitespace in it
        return f"proving returned an invalid digest {digest!r}: a non-empty string without spaces"
    if not isinstance(proof.phases_s, dict):
        return f"proving returned phases {proof.phases_s!r}: a dict of seconds by phase name"
    for name, seconds in proof.phases_s.items():
        number = isinstance(seconds, float) or (
            isinstance(seconds, int) and not isinstance(seconds, bool)
        )
        if not isinstance(name, str) or not number or not math.isfinite(seconds) or seconds < 0:
            return (
                f"proving returned phase {name!r} of {seconds!r} s: a finite number of "
                "seconds >= 0 by name"
            )
    return None
