"""A workload that fails where it is told to: ``PACER_WORKLOAD=tests.faults:make``.

It wraps the noop workload (``FAULTS_INNER=ntt``: the ntt workload at ``PACER_NTT__LOG_N``), and
each job says in its params which calls of which partitions go wrong, and on how many of their
first attempts::

    {"faults": [{"call": "prove", "index": 2, "kind": "hang", "times": 1}]}

``call``: synthesis, prove or verify; ``index``: a partition (absent: every one); ``times``:
the first n calls of that partition (absent: all of them). Kinds: ``raise`` (RuntimeError),
``base`` (a BaseException that is no Exception), ``hang`` (until `release_hung`, or
``HANG_MAX_S`` at most), ``slow`` (``seconds``), and for prove ``bad_digest``, ``none``,
``nan_phase``, for verify ``false``. Every call verifies (``verify_every = 1``), so a completed
job's digests are the inner workload's own.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu.workload import NttWorkload
from pacer.config import Settings
from pacer.workload import NoopWorkload, PartitionSpec, Proof, Workload

CALLS = ("synthesis", "prove", "verify")
KINDS = {
    "synthesis": {"raise", "base", "hang", "slow"},
    "prove": {"raise", "base", "hang", "slow", "bad_digest", "none", "nan_phase"},
    "verify": {"raise", "base", "hang", "slow", "false"},
}
HANG_MAX_S = 120.0  # a hung call's longest wait: no test thread waits unbounded

_release = threading.Event()


def release_hung() -> None:
    """Let every hung call return (a test's teardown): no thread outlives the test."""
    _release.set()


def reset() -> None:
    """Hung calls hang again (a test's setup)."""
    _release.clear()


class InjectedBaseError(BaseException):
    """What ``base`` raises: no Exception, as a careless native binding might raise."""


@dataclass(frozen=True)
class Fault:
    call: str
    kind: str
    index: int | None = None
    times: int | None = None
    seconds: float = 0.0

    @classmethod
    def parse(cls, raw: Any) -> Fault:
        if not isinstance(raw, Mapping):
            raise ValueError(f"params.faults: each must be an object, got {raw!r}")
        unknown = sorted(set(raw) - {"call", "kind", "index", "times", "seconds"})
        if unknown:
            raise ValueError(f"params.faults: unknown key {unknown[0]!r}")
        call, kind = raw.get("call"), raw.get("kind")
        if call not in KINDS or kind not in KINDS[call]:
            raise ValueError(f"params.faults: no fault {kind!r} for call {call!r}")
        return cls(call, kind, raw.get("index"), raw.get("times"), float(raw.get("seconds", 0)))

    def applies(self, call: str, index: int, nth: int) -> bool:
        return (
            call == self.call
            and self.index in (None, index)
            and (self.times is None or nth <= self.times)
        )


@dataclass(frozen=True)
class Buffers:
    """What synthesis hands on: the partition (so prove knows it) and the inner buffers."""

    spec: PartitionSpec
    inner: Any


class FaultWorkload(Workload):
    """The inner workload, with the faults each job's params name."""

    name = "faults"
    threads_per_synthesis = 1
    verify_every = 1

    def __init__(self, inner: NoopWorkload | NttWorkload) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self.calls: Counter[tuple[str, int, str]] = Counter()  # (job, index, call) → calls

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        faults = params.get("faults", [])
        if not isinstance(faults, list):
            raise ValueError("params.faults: must be a list")
        for raw in faults:
            Fault.parse(raw)
        rest = self.inner.check_params({k: v for k, v in params.items() if k != "faults"})
        return {**rest, "faults": faults} if faults else rest

    def partition_bytes(self, params: Mapping[str, Any]) -> int:
        return self.inner.partition_bytes(_inner(params))

    def _fault(self, call: str, spec: PartitionSpec) -> str | None:
        """Count this call; the kind of fault it meets, if any (after a hang or a wait). Calls
        of jobs without faults are not counted: a long run keeps no record of them."""
        if not spec.params.get("faults"):
            return None
        with self._lock:
            self.calls[(spec.job_id, spec.index, call)] += 1
            nth = self.calls[(spec.job_id, spec.index, call)]
        for raw in spec.params.get("faults", []):
            fault = Fault.parse(raw)
            if not fault.applies(call, spec.index, nth):
                continue
            if fault.kind == "raise":
                raise RuntimeError(f"injected {call} fault")
            if fault.kind == "base":
                raise InjectedBaseError(f"injected {call} BaseException")
            if fault.kind == "hang":
                _release.wait(HANG_MAX_S)
            elif fault.kind == "slow":
                time.sleep(fault.seconds)
            else:
                return fault.kind
        return None

    def synthesize(self, spec: PartitionSpec) -> Buffers:
        self._fault("synthesis", spec)
        inner = PartitionSpec(spec.job_id, spec.index, spec.seed, _inner(spec.params))
        return Buffers(spec, self.inner.synthesize(inner))

    def prove(self, buffers: Buffers, worker: int, keep_output: bool = True) -> Any:
        kind = self._fault("prove", buffers.spec)
        if kind == "none":
            return None
        proof = self.inner.prove(buffers.inner, worker, keep_output)
        if kind == "bad_digest":
            return Proof("not a digest", proof.phases_s, proof.output)
        if kind == "nan_phase":
            return Proof(proof.digest, {**proof.phases_s, "work": math.nan}, proof.output)
        return proof

    def verify(self, spec: PartitionSpec, buffers: Buffers, proof: Proof) -> bool:
        if self._fault("verify", spec) == "false":
            return False
        return self.inner.verify(spec, buffers.inner, proof)


def _inner(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k != "faults"}


def make(settings: Settings) -> FaultWorkload:
    """The factory ``PACER_WORKLOAD=tests.faults:make`` names."""
    if os.environ.get("FAULTS_INNER") == "ntt":
        return FaultWorkload(NttWorkload(settings.ntt.log_n or NttWorkload.DEFAULT_LOG_N))
    return FaultWorkload(NoopWorkload())
