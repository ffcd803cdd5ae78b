"""resolve(settings, workload) -> Plan: each value a setting leaves to the workload or the
host, worked out once."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gpu.workload import ntt
from pacer.config import Settings
from pacer.host.cgroup import CgroupLimit
from pacer.host.memory import HostFiles, HostMemory
from pacer.plan import ConfigurationError, describe, host_plan, resolve
from pacer.workload import NoopWorkload, PartitionSpec, Pool, Proof, Workload, WorkloadError
from tests.servers import fake_host

GIB = 2**30


class Sized(NoopWorkload):
    """The noop workload, saying what a workload may say."""

    name = "sized"

    def __init__(self, nbytes: int = GIB, threads: int = 3, verify_every: int = 7,
                 workers: int | None = None) -> None:  # fmt: skip
        self.nbytes = nbytes
        self.threads_per_synthesis = threads
        self.verify_every = verify_every
        self._workers = workers

    @property
    def workers(self) -> int | None:
        return self._workers

    def partition_bytes(self, params: Mapping[str, Any]) -> int:
        return self.nbytes


class Pooled(Sized):
    """A workload with a pool (nothing is allocated: the plan only sizes it); ``kept_bytes``
    of a pool a previous pacer kept for it lie on the host."""

    kept_bytes = 0

    @property
    def pool(self) -> Pool | None:
        return None

    @property
    def prepare_phases_s(self) -> dict[str, float]:
        return {}

    def prepare(self, slots: int, budget_bytes: int, synthesis_workers: int) -> None:
        raise AssertionError("resolve prepares nothing")

    def keep_pool(self) -> None:
        raise AssertionError("resolve keeps nothing")

    def adoptable_bytes(self) -> int:
        return self.kept_bytes


def settings(**sections: Any) -> Settings:
    sections.setdefault("synthesis", {"cores": 24})
    sections.setdefault("memory", {"budget_bytes": 64 * GIB})
    return Settings(**sections)


@pytest.mark.parametrize(
    ("setting", "expected"),
    [(None, 7), (0, 0), (3, 3)],
    ids=["unset-workload-says", "never", "set"],
)
def test_verify_every(setting: int | None, expected: int) -> None:
    plan = resolve(Settings(verify_every=setting), Sized())
    assert plan.verify_every == expected


@pytest.mark.parametrize(
    ("executor", "setting", "expected"),
    [("processes", None, 1), ("processes", 3, 3), ("threads", None, 0), ("threads", 3, 0)],
)
def test_verification_has_threads_of_its_own_where_synthesis_runs_in_processes(
    executor: str, setting: int | None, expected: int
) -> None:
    workload = Sized()
    workload.executor = executor
    settings = Settings() if setting is None else Settings(verify_threads=setting)
    assert resolve(settings, workload).verify_threads == expected


def test_verify_threads_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="verify_threads"):
        Settings(verify_threads=0)


class Silent(Workload):
    """Says nothing of its threads: the contract's default."""

    name = "silent"

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def partition_bytes(self, params: Mapping[str, Any]) -> int:
        return GIB

    def synthesize(self, spec: PartitionSpec) -> Any:
        return None

    def prove(self, buffers: Any, worker: int, keep_output: bool = True) -> Proof:
        return Proof("d")

    def verify(self, spec: PartitionSpec, buffers: Any, proof: Proof) -> bool:
        return True


@pytest.mark.parametrize(
    ("setting", "workload", "threads", "concurrency"),
    [
        (None, Sized(threads=3), 3, 8),  # 24 cores ÷ 3
        (6, Sized(threads=3), 6, 4),
        (None, Silent(), 4, 6),  # a workload that says nothing: 4
    ],
    ids=["unset-workload-says", "set", "contract-default"],
)
def test_threads_per_synthesis_and_the_synthesis_concurrency_from_them(
    setting: int | None, workload: Workload, threads: int, concurrency: int
) -> None:
    plan = resolve(settings(synthesis={"cores": 24, "threads_per_synthesis": setting}), workload)
    assert plan.threads_per_synthesis == threads
    assert plan.caps.synthesis_concurrency == concurrency


def test_a_synthesis_maximum_caps_what_the_cores_allow() -> None:
    plan = resolve(settings(synthesis={"cores": 24, "max_concurrent": 5}), Sized(threads=1))
    assert plan.caps.synthesis_concurrency == 5


@pytest.mark.parametrize(
    ("setting", "expected"), [(0, GIB), (2 * GIB, 2 * GIB)], ids=["unset-workload-says", "set"]
)
def test_partition_bytes_and_the_memory_cap_from_them(setting: int, expected: int) -> None:
    plan = resolve(settings(memory={"budget_bytes": 64 * GIB, "partition_bytes": setting}), Sized())
    assert plan.partition_bytes == expected
    assert plan.caps.inflight_partitions == 64 * GIB // expected


def test_a_partition_larger_than_the_budget_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="more than PACER_MEMORY__BUDGET_BYTES=1073741824"):
        resolve(settings(memory={"budget_bytes": GIB}), Sized(nbytes=2 * GIB))


@pytest.mark.parametrize(
    ("workload", "expected"),
    [(Sized(), 5), (Sized(workers=4), 4)],
    ids=["unset-setting-decides", "workload-runs-its-own"],
)
def test_workers(workload: Workload, expected: int) -> None:
    assert resolve(Settings(gpu={"workers": 5}), workload).workers == expected


def test_without_the_host_the_budget_is_as_configured() -> None:
    plan = resolve(settings(), Sized())
    assert (plan.budget_bytes, plan.memory.clamped, plan.memory.usable_bytes) == (64 * GIB, False,
                                                                                None)  # fmt: skip


@pytest.mark.parametrize(
    ("reserve", "budget"),
    [(0, 20 * GIB - 4 * GIB), (2 * GIB, 18 * GIB)],  # unset: 10 % of MemTotal, at most 8 GiB
    ids=["unset-reserve", "set-reserve"],
)
def test_the_host_clamps_the_budget_and_the_caps_follow(reserve: int, budget: int) -> None:
    host = HostMemory(40 * GIB, 20 * GIB)
    memory = {"budget_bytes": 64 * GIB, "host_reserve_bytes": reserve}
    plan = resolve(settings(memory=memory), Sized(), host)
    assert plan.budget_bytes == budget
    assert plan.memory.clamped
    assert plan.memory.configured_budget_bytes == 64 * GIB
    assert plan.caps.inflight_partitions == budget // GIB


def test_a_host_that_cannot_hold_one_partition_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"the host cannot hold one partition of 4\.0 GiB"):
        resolve(settings(), Sized(nbytes=4 * GIB), HostMemory(8 * GIB, 4 * GIB))


def test_a_workload_without_a_pool_gets_no_slots() -> None:
    plan = resolve(settings(), Sized())
    assert (plan.pool_slots, plan.pool_slots_wanted) == (0, 0)


@pytest.mark.parametrize(
    ("budget", "slots", "expected"),
    [
        (64 * GIB, 0, 8 + 16 + 2),  # unset: a slot per synthesis, twice the setpoint, per worker
        (20 * GIB, 0, 20),  # unset, within the budget
        (64 * GIB, 5, 5),  # set
    ],
    ids=["unset-wanted", "unset-budget-bound", "set"],
)
def test_pool_slots(budget: int, slots: int, expected: int) -> None:
    chosen = settings(memory={"budget_bytes": budget}, gpu={"pool_slots": slots})
    plan = resolve(chosen, Pooled(threads=3, workers=2))
    assert plan.pool_slots == expected
    assert plan.pool_slots_wanted == 8 + math.ceil(2 * 8.0) + 2


def test_a_pool_larger_than_the_host_is_refused() -> None:
    chosen = settings(gpu={"pool_slots": 30})
    with pytest.raises(ConfigurationError, match=r"pinned pool of 30 slots .* does not fit"):
        resolve(chosen, Pooled(), HostMemory(100 * GIB, 28 * GIB))


def test_a_pool_kept_for_this_start_counts_as_the_hosts_to_give() -> None:
    # 30 slots of 1 GiB: 28 GiB available, and the previous pacer's pool of 30 GiB in use.
    chosen = settings(gpu={"pool_slots": 30}, memory={"budget_bytes": 40 * GIB})
    workload = Pooled()
    workload.kept_bytes = 30 * GIB
    host = HostMemory(100 * GIB, 28 * GIB)
    plan = resolve(chosen, workload, host)
    assert plan.pool_slots == 30
    assert plan.memory.usable_bytes == 58 * GIB - host.default_reserve_bytes()
    assert plan.memory.as_dict()["host_kept_bytes"] == 30 * GIB


def test_a_pool_larger_than_the_cgroup_allows_is_refused_naming_its_memory_max() -> None:
    chosen = settings(gpu={"pool_slots": 30}, memory={"host_reserve_bytes": GIB})
    host = HostMemory(755 * GIB, 700 * GIB, cgroup=CgroupLimit("/kubepods/pod1", 24 * GIB, GIB))
    with pytest.raises(ConfigurationError) as refused:
        resolve(chosen, Pooled(), host)
    assert "the cgroup /kubepods/pod1 has 23.0 GiB left under its memory.max of 24.0 GiB" in str(
        refused.value
    )
    assert str(refused.value).endswith(
        "or raise the memory limit of the cgroup /kubepods/pod1 (its memory.max: a container's "
        "memory limit, systemd's MemoryMax=)"
    )


def test_a_pool_kept_for_this_start_counts_beside_the_cgroup_s_room() -> None:
    # 30 slots of 1 GiB in a cgroup with 10 GiB left: the kept 30 GiB is charged elsewhere.
    chosen = settings(gpu={"pool_slots": 30}, memory={"host_reserve_bytes": GIB})
    workload = Pooled()
    workload.kept_bytes = 30 * GIB
    host = HostMemory(755 * GIB, 700 * GIB, cgroup=CgroupLimit("/pod", 64 * GIB, 54 * GIB))
    plan = resolve(chosen, workload, host)
    assert (plan.pool_slots, plan.memory.usable_bytes) == (30, 39 * GIB)
    assert plan.memory.bound == "memory.max of /pod"


def test_the_ntt_workloads_own_parameters_are_recorded() -> None:
    chosen = Settings(gpu={"devices": "none"}, ntt={"cpu_backend": "numpy"}, verify_every=None)
    plan = resolve(chosen, ntt(chosen))
    assert (plan.workload, plan.field, plan.log_n, plan.kernel) == ("ntt", "babybear", 18, "numpy")
    assert (plan.executor, plan.gpu_model, plan.verify_every) == ("threads", "none", 1)
    assert plan.partition_bytes == 3 * 8 * 2**18


def test_the_estimates_key_follows_what_sets_the_durations() -> None:
    plan = resolve(settings(), Sized())
    assert resolve(settings(), Sized()).estimates_key == plan.estimates_key
    assert resolve(settings(synthesis={"cores": 12}), Sized()).estimates_key != plan.estimates_key
    assert resolve(settings(), Sized(threads=2)).estimates_key != plan.estimates_key
    assert '"workload": "sized"' in plan.estimates_key


def test_describe_lists_the_plan_for_pacer_config() -> None:
    rows = dict(describe(resolve(settings(), Pooled(workers=2))))
    assert rows["workload"] == "sized"
    assert rows["verify_every"] == "7"
    assert rows["field"] == ""  # none
    assert rows["synthesis_concurrency"] == "8"
    assert rows["inflight_partitions"] == "64"
    assert rows["pool_slots"] == str(8 + 16 + 2)
    assert rows["budget_bytes"] == str(64 * GIB)
    assert set(rows) == set(resolve(settings(), Sized()).as_dict())


def test_the_plan_on_this_host_loads_the_workload_and_reads_its_memory(tmp_path: Path) -> None:
    files = fake_host(tmp_path, total=40 * GIB, available=20 * GIB)
    chosen = Settings(workload="noop", memory={"budget_bytes": 64 * GIB})
    plan = host_plan(chosen, files)
    assert (plan.workload, plan.partition_bytes) == ("noop", 64)
    assert plan.budget_bytes == 16 * GIB  # 20 GiB available less the 4 GiB reserve
    assert dict(describe(plan))["host_usable_bound"] == "MemAvailable"
    unread = host_plan(chosen, HostFiles(tmp_path / "absent"))
    assert unread.budget_bytes == 64 * GIB  # as configured, as the service does without it
    with pytest.raises(WorkloadError, match="cannot import no_such_module"):
        host_plan(Settings(workload="no_such_module:make"))
