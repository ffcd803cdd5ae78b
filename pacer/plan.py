"""The plan: every value the service runs by, resolved once from the settings and the workload.

Where a setting is unset, the workload decides (``PACER_VERIFY_EVERY``,
``PACER_SYNTHESIS__THREADS_PER_SYNTHESIS``, ``PACER_MEMORY__PARTITION_BYTES``); where the
settings and the host together decide (the budget in effect, the caps, the pinned pool's
slots), `resolve` works it out. Nothing else derives these: the service, the pipeline, the
policy and the workload's ``prepare`` read them from the `Plan`; ``/v1/status`` shows it
(``plan``), and `describe` lists `host_plan`, the plan on this host, for ``pacer config``. The
workload's own parameters (field, size, kernel) are its factory's to resolve
(`gpu.workload.ntt`); the plan records them.

>>> from pacer.workload import NoopWorkload
>>> plan = resolve(Settings(synthesis={"cores": 8}, memory={"budget_bytes": 640}),
...                NoopWorkload())
>>> plan.verify_every, plan.threads_per_synthesis, plan.partition_bytes
(1, 1, 64)
>>> plan.caps.synthesis_concurrency, plan.caps.inflight_partitions, plan.pool_slots
(8, 10, 0)
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from pacer.config import Settings
from pacer.control.estimates import estimates_key
from pacer.control.policy import Caps
from pacer.host.memory import HOST_FILES, HostFiles, HostMemory, MemoryPlan, bytes_text
from pacer.workload import Workload, load_workload, pooled

UNREAD_HOST_BUDGET_BYTES = 64 * 2**30
"""The automatic memory budget where the host's memory cannot be read (bytes)."""


class ConfigurationError(Exception):
    """The settings describe a service that cannot start; the message says why."""


@dataclass(frozen=True)
class Plan:
    """What the service runs by (``resolve`` builds it; sizes in bytes)."""

    workload: str  # the workload's name
    field: str | None  # the prime field, where the workload has one
    log_n: int | None  # partition size as log2 of the workload's domain, where it has one
    kernel: str | None  # how its CPU work computes, where it has a choice
    executor: str  # where synthesis runs: threads or processes
    gpu_model: str  # "none" when proving on the CPU
    cores: int  # CPU cores synthesis may use
    verify_every: int  # verify every n-th proved partition; 0: never
    verify_threads: int  # threads of verification's own; 0: it shares the synthesis threads
    threads_per_synthesis: int
    workers: int  # proving workers
    partition_bytes: int
    memory: MemoryPlan  # the budget configured and in effect, and the host's figures
    caps: Caps  # syntheses at once, partitions in flight
    pool_slots: int  # pinned slots to allocate; 0: the workload holds no pool
    pool_slots_wanted: int  # what keeps every synthesis, the ready buffer and each worker fed

    @property
    def budget_bytes(self) -> int:
        """The memory budget in effect."""
        return self.memory.budget_bytes

    @property
    def estimates_key(self) -> str:
        """What estimates saved under this plan are valid for (`pacer.control.estimates`)."""
        params: dict[str, object] = {
            "field": self.field,
            "log_n": self.log_n,
            "kernel": self.kernel,
            "partition_bytes": self.partition_bytes,
            "threads_per_synthesis": self.threads_per_synthesis,
            "executor": self.executor,
            "gpu_workers": self.workers,
        }
        return estimates_key(
            workload=self.workload,
            params={name: value for name, value in params.items() if value is not None},
            gpu_model=self.gpu_model,
            cores=self.cores,
        )

    def as_dict(self) -> dict[str, Any]:
        """The plan as ``/v1/status`` shows it: flat, the memory figures and caps included."""
        out = asdict(self)
        del out["memory"], out["caps"]
        return {
            **out,
            "budget_bytes": self.budget_bytes,
            "configured_budget_bytes": self.memory.configured_budget_bytes,
            "host_usable_bytes": self.memory.usable_bytes,
            "host_usable_bound": self.memory.bound,
            **asdict(self.caps),
        }


def resolve(settings: Settings, workload: Workload, host: HostMemory | None = None) -> Plan:
    """The plan for ``workload`` under ``settings``, fitted to ``host`` where it was read (the
    budget clamped to MemAvailable, or the room its cgroup's memory.max leaves where that is
    less, less the reserve; without it, as configured).

    ConfigurationError when one partition exceeds the budget, the host cannot hold one, or a
    pinned pool would not fit the host.
    """
    partition_bytes = int(settings.memory.partition_bytes) or max(1, workload.partition_bytes({}))
    pool_workload = pooled(workload)
    if host is not None and pool_workload is not None:
        # A pool the previous pacer kept is in use, not available, but it is this start's (and
        # charged to the cgroup that first wrote it, not to this one).
        host = dataclasses.replace(host, kept_bytes=pool_workload.adoptable_bytes())
    memory = _memory(settings, partition_bytes, host)
    threads = settings.synthesis.threads_per_synthesis or workload.threads_per_synthesis
    workers = settings.gpu.workers if workload.workers is None else workload.workers
    caps = Caps.from_host(
        cores=settings.synthesis.cores,
        threads_per_synthesis=threads,
        max_concurrent=settings.synthesis.max_concurrent,
        budget_bytes=memory.budget_bytes,
        partition_bytes=partition_bytes,
        synthesis_queue=True,  # a synthesis waits for one of the pipeline's threads
    )
    slots = wanted = 0
    if pool_workload is not None:
        # One slot per synthesis the cores allow, twice the ready setpoint, one per worker.
        wanted = caps.synthesis_concurrency + math.ceil(2 * settings.controller.target_ready)
        wanted += workers
        slots = settings.gpu.pool_slots or min(caps.inflight_partitions, wanted)
        _check_pool_fits(settings, slots, partition_bytes, memory)
    return Plan(
        workload=workload.name,
        field=workload.field_name,
        log_n=workload.log_n,
        kernel=workload.kernel,
        executor=workload.executor,
        gpu_model=workload.gpu_model,
        cores=settings.synthesis.cores,
        verify_every=(
            workload.verify_every if settings.verify_every is None else settings.verify_every
        ),
        # In processes, a synthesis thread only waits: a verification must not take it (D201).
        verify_threads=settings.verify_threads if workload.executor == "processes" else 0,
        threads_per_synthesis=threads,
        workers=workers,
        partition_bytes=partition_bytes,
        memory=memory,
        caps=caps,
        pool_slots=slots,
        pool_slots_wanted=wanted,
    )


def _memory(settings: Settings, partition_bytes: int, host: HostMemory | None) -> MemoryPlan:
    budget = int(settings.memory.budget_bytes)
    if budget and partition_bytes > budget:
        raise ConfigurationError(
            f"one partition takes {partition_bytes} bytes, more than "
            f"PACER_MEMORY__BUDGET_BYTES={budget}"
        )
    if host is None:
        if not budget:  # automatic, where the host was not read
            return MemoryPlan(UNREAD_HOST_BUDGET_BYTES, UNREAD_HOST_BUDGET_BYTES, automatic=True)
        return MemoryPlan(budget, budget)
    reserve = int(settings.memory.host_reserve_bytes) or host.default_reserve_bytes()
    memory = MemoryPlan.fit(budget, host, reserve)
    if memory.budget_bytes < partition_bytes:
        raise ConfigurationError(
            f"the host cannot hold one partition of {bytes_text(partition_bytes)}: "
            f"{host_room(memory)}; {more_room(memory)} or lower "
            "PACER_MEMORY__HOST_RESERVE_BYTES"
        )
    return memory


def _check_pool_fits(
    settings: Settings, slots: int, partition_bytes: int, memory: MemoryPlan
) -> None:
    """Refuse a pinned pool larger than MemAvailable (or the cgroup's room) less the reserve:
    pinned memory is neither swapped nor reclaimed, and pinning it would take the host (or the
    cgroup) into the OOM killer."""
    usable = memory.usable_bytes
    pool_bytes = slots * partition_bytes
    if usable is None or pool_bytes <= usable:
        return
    source = (
        f"PACER_GPU__POOL_SLOTS={slots}"
        if settings.gpu.pool_slots
        else f"{slots}, sized by PACER_GPU__POOL_SLOTS=0 within PACER_MEMORY__BUDGET_BYTES"
    )
    raise ConfigurationError(
        f"the pinned pool of {slots} slots × {bytes_text(partition_bytes)} = "
        f"{bytes_text(pool_bytes)} ({source}) does not fit the host: "
        f"{host_room(memory)}. Pinned memory cannot be swapped: allocating it would "
        "take the host into the OOM killer. Lower PACER_GPU__POOL_SLOTS or "
        f"PACER_MEMORY__BUDGET_BYTES, or {more_room(memory)}"
    )


def host_room(memory: MemoryPlan) -> str:
    """What the host can give, for a message: MemAvailable, or the room the cgroup's
    memory.max leaves where that is less (naming the cgroup), less the reserve."""
    host, reserve = memory.host, memory.reserve_bytes
    assert host is not None
    assert reserve is not None
    room = f"MemAvailable is {bytes_text(host.available_bytes)}"
    if host.cgroup is not None and host.cgroup_binds:
        cgroup = host.cgroup
        room = (
            f"the cgroup {cgroup.path} has {bytes_text(cgroup.room_bytes)} left under its "
            f"memory.max of {bytes_text(cgroup.max_bytes)} (memory.current "
            f"{bytes_text(cgroup.current_bytes)}), less than MemAvailable "
            f"({bytes_text(host.available_bytes)})"
        )
    kept = f" (and {bytes_text(host.kept_bytes)} kept for it)" if host.kept_bytes else ""
    return (
        f"{room}{kept}; less the reserve of {bytes_text(reserve)} "
        f"(PACER_MEMORY__HOST_RESERVE_BYTES) that leaves "
        f"{bytes_text(max(0, host.free_for_service_bytes - reserve))}"
    )


def more_room(memory: MemoryPlan) -> str:
    """How to give the service more memory, for a message: raise the cgroup's memory.max where
    it is the bound, else free memory on the host."""
    host = memory.host
    if host is not None and host.cgroup is not None and host.cgroup_binds:
        return (
            f"raise the memory limit of the cgroup {host.cgroup.path} (its memory.max: a "
            "container's memory limit, systemd's MemoryMax=)"
        )
    return "free memory on the host"


def describe(plan: Plan) -> list[tuple[str, str]]:
    """The plan as (name, value) rows for ``pacer config``: the names of `Plan.as_dict`,
    values as text (sizes in bytes; an empty value: none)."""
    return [
        (name, "" if value is None else json.dumps(value).strip('"'))
        for name, value in plan.as_dict().items()
    ]


def host_plan(settings: Settings, files: HostFiles = HOST_FILES) -> Plan:
    """The plan ``settings`` give on this host, as the service would resolve it at start: the
    workload they name loaded (and closed again; nothing is allocated), the budget fitted to
    /proc/meminfo and this process's cgroup (``files``) where they can be read. What ``pacer
    config`` shows. WorkloadError or ConfigurationError when the service would refuse to start.
    """
    workload = load_workload(settings)
    try:
        try:
            host: HostMemory | None = HostMemory.read(files)
        except (OSError, ValueError):
            host = None
        return resolve(settings, workload, host)
    finally:
        workload.close()
