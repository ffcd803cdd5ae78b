"""Reading the host's memory and fitting the budget to it (pure; files for /proc/meminfo and
the cgroup tree)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pacer.host.cgroup import CgroupLimit
from pacer.host.memory import HostFiles, HostMemory, MemoryPlan
from tests.servers import fake_host

GIB = 2**30
MEMINFO = """MemTotal:       24684084 kB
MemFree:        23623580 kB
MemAvailable:   24249532 kB
HugePages_Total:       0
"""


def test_host_memory_is_read_from_meminfo_in_bytes(tmp_path: Path) -> None:
    path = tmp_path / "meminfo"
    path.write_text(MEMINFO)
    files = HostFiles(path, tmp_path / "no-self-cgroup")
    assert HostMemory.read(files) == HostMemory(24684084 * 1024, 24249532 * 1024)


def test_host_memory_holds_this_process_s_cgroup_limit(tmp_path: Path) -> None:
    files = fake_host(tmp_path, total=128 * GIB, available=100 * GIB, cgroup="/pacer.service",
                      limits={"/pacer.service": (16 * GIB, GIB)})  # fmt: skip
    host = HostMemory.read(files)
    assert host.cgroup == CgroupLimit("/pacer.service", 16 * GIB, GIB)
    assert (host.room_bytes, host.cgroup_binds) == (15 * GIB, True)


def test_meminfo_without_mem_available_is_refused_with_the_line_missing(tmp_path: Path) -> None:
    path = tmp_path / "meminfo"
    path.write_text("MemTotal:       24684084 kB\n")  # kernels before 3.14 had no MemAvailable
    with pytest.raises(ValueError, match="has no MemAvailable line"):
        HostMemory.read(HostFiles(path))


@pytest.mark.parametrize(
    ("total", "reserve"),
    [(24 * GIB, int(2.4 * GIB)), (80 * GIB, 8 * GIB), (755 * GIB, 8 * GIB)],
    ids=["ci-host", "at-the-cap", "large-host"],
)
def test_the_default_reserve_is_a_tenth_of_the_host_at_most_8_gib(total: int, reserve: int) -> None:
    assert HostMemory(total, total).default_reserve_bytes() == reserve


@pytest.mark.parametrize(
    ("budget", "available", "reserve", "effective"),
    [
        (64 * GIB, 100 * GIB, 8 * GIB, 64 * GIB),
        (64 * GIB, 72 * GIB, 8 * GIB, 64 * GIB),
        (64 * GIB, 20 * GIB, 2 * GIB, 18 * GIB),
        (64 * GIB, 1 * GIB, 2 * GIB, 0),
    ],
    ids=["fits", "fits-exactly", "clamped", "reserve-above-available"],
)
def test_the_budget_is_clamped_to_mem_available_less_the_reserve(
    budget: int, available: int, reserve: int, effective: int
) -> None:
    plan = MemoryPlan.fit(budget, HostMemory(128 * GIB, available), reserve)
    assert plan.budget_bytes == effective
    assert plan.clamped is (effective < budget)
    assert plan.usable_bytes == max(0, available - reserve)


def test_a_plan_before_the_host_is_read_has_no_host_figures() -> None:
    plan = MemoryPlan(64 * GIB, 64 * GIB)
    assert plan.usable_bytes is None
    assert not plan.clamped
    assert plan.as_dict()["host_available_bytes"] is None


@pytest.mark.parametrize(
    ("available", "limit", "current", "usable", "bound"),
    [
        (100 * GIB, 16 * GIB, 4 * GIB, 12 * GIB - 16 * GIB // 10, "memory.max of /pod"),
        (10 * GIB, 16 * GIB, 4 * GIB, 10 * GIB - 16 * GIB // 10, "MemAvailable"),
    ],
    ids=["cgroup-tighter", "host-tighter"],
)
def test_the_budget_is_clamped_to_the_tighter_of_mem_available_and_the_cgroup(
    available: int, limit: int, current: int, usable: int, bound: str
) -> None:
    host = HostMemory(128 * GIB, available, cgroup=CgroupLimit("/pod", limit, current))
    plan = MemoryPlan.fit(64 * GIB, host, host.default_reserve_bytes())
    assert plan.budget_bytes == plan.usable_bytes == usable  # a tenth of memory.max reserved
    assert plan.bound == bound
    assert plan.as_dict()["cgroup_max_bytes"] == limit


def test_a_pool_kept_for_this_start_is_outside_the_cgroup_s_room() -> None:
    # The previous pod's pool (30 GiB) was charged to that pod: adopting it costs this pod's
    # cgroup nothing, so it adds to the room memory.max leaves (10 GiB).
    host = HostMemory(755 * GIB, 700 * GIB, 30 * GIB, CgroupLimit("/pod", 64 * GIB, 54 * GIB))
    assert MemoryPlan.fit(64 * GIB, host, 0).usable_bytes == 40 * GIB
