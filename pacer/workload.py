"""What a partition's work is: the Workload contract, the noop workload and the loader.

The pipeline calls ``synthesize`` on a CPU executor thread, ``prove`` on a proving worker's
thread, and ``verify`` on the CPU. It reaches the GPU only through a workload.

``PACER_WORKLOAD`` names the workload:

- ``gpu.workload:ntt`` (default; ``ntt`` for short): the Groth16 "H" computation over a prime
  field, on the GPUs when there are any (`gpu.workload`).
- ``noop``: as little work as a partition can be, for measuring the pipeline itself.
- ``module:factory``: your own; ``factory(settings)`` returns a `Workload` (subclass it: the
  members you leave out keep its defaults), or a `PooledWorkload` when it holds a pool.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pacer.config import Settings
from pacer.runtime.early_start import WORKLOAD_ALIASES


@dataclass(frozen=True)
class PartitionSpec:
    """One partition to synthesize: the job's seed and parameters, and its index."""

    job_id: str
    index: int
    seed: int
    params: Mapping[str, Any]


@dataclass(frozen=True)
class Proof:
    """What proving one partition produced, as `Workload.prove` returns it.

    - ``digest``: the result, as a non-empty string without whitespace (a hex hash, say). It is
      journaled; a job's ``result_digest`` is the SHA-256 of its partitions' digests in order.
    - ``phases_s``: how long each phase of proving took, in seconds by phase name (``{"h2d":
      0.4, "ntt": 0.9}``; empty is fine). Each becomes a ``pacer_gpu_phase_seconds{phase=...}``
      observation and is journaled with the partition.
    - ``output``: anything `Workload.verify` needs beyond the digest; never stored. Leave it
      None when ``prove`` was called with ``keep_output=False``.

    A proof with a bad digest or a phase that is not a finite number of seconds >= 0 fails the
    attempt, naming the field. ``examples/merkle_workload.py`` is a workload to start from.
    """

    digest: str
    phases_s: dict[str, float] = field(default_factory=dict)
    output: Any = None


@runtime_checkable
class Workload(Protocol):
    """The work of one partition, and what the service asks of whatever does it.

    Subclass it: the five methods without a body are the work; every other member has a
    neutral default (a CPU workload of one worker per proving thread, holding nothing) that a
    workload overrides where it knows better. Methods run off the event loop, so they may
    block (but `abandoned`, which must not). The attributes are read once, at start, by
    `pacer.plan.resolve`.
    """

    name: str

    threads_per_synthesis: int = 4
    """Threads one synthesis keeps busy, where ``PACER_SYNTHESIS__THREADS_PER_SYNTHESIS`` is
    unset (the synthesis-concurrency cap divides the cores by it)."""
    verify_every: int = 1
    """Verify every n-th proved partition (0: never), where ``PACER_VERIFY_EVERY`` is unset."""
    executor: str = "threads"
    """Where its synthesis runs: threads of the service, or processes."""
    log_n: int | None = None
    """Partition size as log2 of its domain, where it has one (status, saved estimates)."""
    kernel: str | None = None
    """How its CPU work computes (numba, numpy), where it has a choice."""

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Validated job parameters; ValueError naming the parameter and the rule."""
        ...

    def partition_bytes(self, params: Mapping[str, Any]) -> int:
        """Host memory one partition's buffers hold (bytes)."""
        ...

    def synthesize(self, spec: PartitionSpec) -> Any:
        """The partition's buffers, deterministic from the spec."""
        ...

    def prove(self, buffers: Any, worker: int, keep_output: bool = True) -> Proof:
        """Prove one partition on proving worker ``worker``. ``keep_output`` is False when
        ``verify`` will not be called with this proof, so bulky output can stay out of it."""
        ...

    def verify(self, spec: PartitionSpec, buffers: Any, proof: Proof) -> bool:
        """Whether ``proof`` is right for these buffers."""
        ...

    def release(self, buffers: Any) -> None:
        """The partition is done with ``buffers`` (proved, failed, or its call returned after
        it was abandoned): what they hold may be reused."""
        return None

    @property
    def workers(self) -> int | None:
        """Proving workers it runs (a GPU workload: its devices × workers per device); None:
        as many as ``PACER_GPU__WORKERS`` says."""
        return None

    def abandoned(self, spec: PartitionSpec, call: str) -> None:
        """The pipeline abandoned ``call`` ("synthesize", "prove" or "verify") of partition
        ``spec`` past its time limit: its attempt has failed, and its buffers stay held until
        the call returns. ``spec`` is the very object the attempt's calls were given (a retry
        of the partition gets another); the call may not have begun (one still queued never
        will). A workload that can stop that call (a synthesis in a process it can kill)
        does, so the call returns and what it holds comes back; by default nothing. Called on
        the event loop: it must not block."""
        return None

    def device_of(self, worker: int) -> int:
        """The GPU proving worker ``worker`` proves on: the label of its busy time and metrics.
        By default each worker is its own."""
        return worker

    @property
    def field_name(self) -> str | None:
        """The prime field it computes over, where it has one."""
        return None

    @property
    def gpu_model(self) -> str:
        """The GPUs' model(s), "NVIDIA H200", what saved estimates are keyed by; "none"."""
        return "none"

    @property
    def synthesis_restarts(self) -> int:
        """Times its synthesis processes were replaced after one died (0 without any)."""
        return 0

    def close(self) -> None:
        """Free what it holds (at shutdown, after the last call)."""
        return None


class Pool(Protocol):
    """A pinned host-memory pool as the service reads it (`gpu.pool.pinned.PinnedPool`): slots and
    bytes, and the counters of its lending."""

    @property
    def backend(self) -> str: ...

    @property
    def slots_total(self) -> int: ...

    @property
    def slots_free(self) -> int: ...

    @property
    def total_bytes(self) -> int: ...

    @property
    def in_use_bytes(self) -> int: ...

    @property
    def checkouts(self) -> int: ...

    @property
    def waits(self) -> int: ...

    @property
    def fallbacks(self) -> int: ...

    @property
    def allocations_after_warmup(self) -> int: ...

    @property
    def slots_adopted(self) -> int:
        """Slots a previous pacer on this host left, adopted instead of allocated."""
        ...


@runtime_checkable
class PooledWorkload(Workload, Protocol):
    """A workload whose partitions live in a pool it allocates once, before the service is
    ready (`prepare`), and frees in ``close`` (or keeps for the next pacer: `keep_pool`);
    dispatch also waits for a free slot."""

    @property
    def pool(self) -> Pool | None:
        """The pool, once ``prepare`` has allocated it."""
        ...

    @property
    def prepare_phases_s(self) -> dict[str, float]:
        """How long each part of ``prepare`` took (s), by name; empty before it."""
        ...

    def prepare(self, slots: int, budget_bytes: int, synthesis_workers: int) -> None:
        """Allocate ``slots`` partitions' worth of pool within ``budget_bytes`` (or adopt what
        a previous pacer kept), and what runs ``synthesis_workers`` syntheses at once (the
        synthesis-concurrency cap)."""
        ...

    def keep_pool(self) -> None:
        """At ``close``, leave the pool for the next pacer on this host instead of freeing it
        (a handover); where the pool cannot be kept, it is freed as ever."""
        ...

    def adoptable_bytes(self) -> int:
        """Host memory that a pool a previous pacer kept, fit for this workload, holds now: it
        will be adopted, not allocated, so the plan counts it as the host's to give."""
        ...


def pooled(workload: Workload) -> PooledWorkload | None:
    """``workload`` as a pooled workload, or None when it holds no pool."""
    return workload if isinstance(workload, PooledWorkload) else None


class WorkloadError(Exception):
    """A workload could not be loaded; the message says which and why."""


def contract_members(protocol: type) -> list[str]:
    """The members ``protocol`` (`Workload`, `PooledWorkload`) asks for, sorted."""
    names: set[str] = set()
    for base in protocol.__mro__:
        if base is Protocol or not getattr(base, "_is_protocol", False):
            continue
        declared = {*vars(base), *vars(base).get("__annotations__", {})}
        names |= {name for name in declared if not name.startswith("_")}
    return sorted(names)


def job_seed(job_id: str, params: Mapping[str, Any]) -> int:
    """The seed a job's partitions derive from: ``params.seed``, else one from the job id."""
    seed = params.get("seed")
    if isinstance(seed, int):
        return seed
    return int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:8], "little")


def int_param(params: Mapping[str, Any], name: str, low: int, high: int, default: int) -> int:
    """``params[name]`` (``default`` when absent), an integer from ``low`` to ``high``;
    ValueError naming the parameter and the rule."""
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"params.{name}: must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"params.{name}: must be between {low} and {high}, got {value}")
    return value


def check_known(params: Mapping[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    """Refuse a parameter not in ``known``; the checked ``seed``, if given."""
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"params.{unknown[0]}: unknown parameter (known: {', '.join(known)})")
    if "seed" in params:
        return {"seed": int_param(params, "seed", 0, 2**63 - 1, 0)}
    return {}


class NoopWorkload(Workload):
    """A partition of a few bytes whose proof is their hash: measures the pipeline alone."""

    name = "noop"
    threads_per_synthesis = 1

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return check_known(params, ("seed",))

    def partition_bytes(self, params: Mapping[str, Any]) -> int:
        return 64

    def synthesize(self, spec: PartitionSpec) -> Any:
        return f"{spec.seed}:{spec.index}".encode()

    def prove(self, buffers: Any, worker: int, keep_output: bool = True) -> Proof:
        return Proof(hashlib.sha256(buffers).hexdigest())

    def verify(self, spec: PartitionSpec, buffers: Any, proof: Proof) -> bool:
        return proof.digest == hashlib.sha256(buffers).hexdigest()


def load_workload(settings: Settings) -> Workload:
    """The workload ``PACER_WORKLOAD`` names: ``noop``, or what ``module:factory`` (or its
    short name) returns for ``settings``. WorkloadError says why one cannot be loaded, naming
    the members it lacks."""
    name = settings.workload
    if name == "noop":
        return NoopWorkload()
    module_name, _, factory_name = WORKLOAD_ALIASES.get(name, name).partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise WorkloadError(f"PACER_WORKLOAD={name}: cannot import {module_name}: {exc}") from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise WorkloadError(f"PACER_WORKLOAD={name}: {module_name} has no callable {factory_name}")
    workload = factory(settings)
    missing = [m for m in contract_members(Workload) if not hasattr(workload, m)]
    if missing or not isinstance(workload, Workload):
        raise WorkloadError(
            f"PACER_WORKLOAD={name}: the factory returned {type(workload).__name__}, which lacks "
            f"{', '.join(missing)} of the Workload contract (subclass pacer.workload.Workload: "
            "what it leaves out keeps the defaults)"
        )
    return workload
