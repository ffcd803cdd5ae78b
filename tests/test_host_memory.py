"""Reading the host's memory and fitting the budget to it (pure; a file for /proc/meminfo)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pacer.host_memory import HostMemory, MemoryPlan

GIB = 2**30
MEMINFO = """MemTotal:       24684084 kB
MemFree:        23623580 kB
MemAvailable:   24249532 kB
HugePages_Total:       0
"""


def test_host_memory_is_read_from_meminfo_in_bytes(tmp_path: Path) -> None:
    path = tmp_path / "meminfo"
    path.write_text(MEMINFO)
    assert HostMemory.read(path) == HostMemory(24684084 * 1024, 24249532 * 1024)


def test_meminfo_without_mem_available_is_refused_with_the_line_missing(tmp_path: Path) -> None:
    path = tmp_path / "meminfo"
    path.write_text("MemTotal:       24684084 kB\n")  # kernels before 3.14 had no MemAvailable
    with pytest.raises(ValueError, match="has no MemAvailable line"):
        HostMemory.read(path)


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
