"""The memory budget and the pinned pool against the host's memory at start, on a fake
/proc/meminfo and cgroup tree: silent when they fit, the budget clamped with a warning when it
does not, the pool refused (before anything is pinned) when it does not fit."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from pacer.host.memory import HostFiles
from pacer.plan import ConfigurationError
from pacer.server import Server
from pacer.service.lifecycle import Service
from tests.servers import call, fake_host, settings_for, until_done
from tests.service.test_gpu_path import LOG_N

pytestmark = pytest.mark.asyncio
GIB = 2**30
SLOT = 3 * 8 << LOG_N  # a, b, c of Goldilocks: test_gpu_path's shared GPU workload
GPU_PATH = {
    "PACER_WORKLOAD": "tests.service.test_gpu_path:shared_gpu_workload",
    "PACER_SYNTHESIS__CORES": "2",
}


def memory_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and "memory" in r.getMessage()
    ]


@pytest.mark.slow
async def test_a_budget_that_fits_the_host_starts_silently_as_configured(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    host = fake_host(tmp_path / "host", total=128 * GIB, available=100 * GIB)
    settings = settings_for(tmp_path, PACER_MEMORY__BUDGET_BYTES="64GiB")
    server = Server(Service.build(settings, CollectorRegistry(), host_files=host))
    with caplog.at_level(logging.WARNING):
        await server.start()
    try:
        assert memory_warnings(caplog) == []
        _, status = await call(server, "GET", "/v1/status")
        memory = status["memory"]
        assert memory["budget_bytes"] == memory["configured_budget_bytes"] == 64 * GIB
        assert (memory["budget_clamped"], memory["budget_automatic"]) == (False, False)
        assert memory["host_available_bytes"] == 100 * GIB
        assert memory["host_total_bytes"] == 128 * GIB
        assert memory["host_reserve_bytes"] == 8 * GIB  # 10% of MemTotal, at most 8 GiB
        assert memory["host_usable_bytes"] == 92 * GIB
        assert memory["host_usable_bound"] == "MemAvailable"
        assert memory["cgroup_path"] is memory["cgroup_max_bytes"] is None
    finally:
        await server.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("limits", "usable"),
    [(None, 20 * GIB - 24 * GIB // 10), ({"/pacer": (8 * GIB, GIB)}, 7 * GIB - 8 * GIB // 10)],
    ids=["meminfo", "cgroup"],
)
async def test_the_default_budget_is_what_the_host_gives_without_a_warning(
    limits: dict[str, tuple[int | str, int]] | None,
    usable: int,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A 24 GiB host (a CI machine), or an 8 GiB cgroup on it, 1 GiB of that in use.
    host = fake_host(tmp_path / "host", total=24 * GIB, available=20 * GIB,
                     cgroup="/" if limits is None else "/pacer", limits=limits)  # fmt: skip
    env = {"PACER_MEMORY__PARTITION_BYTES": "256MiB", "PACER_SYNTHESIS__CORES": "4"}
    server = Server(
        Service.build(settings_for(tmp_path, **env), CollectorRegistry(), host_files=host)
    )
    with caplog.at_level(logging.WARNING):
        await server.start()
    try:
        assert memory_warnings(caplog) == []
        assert server.service.pipeline.budget_bytes == usable
        _, status = await call(server, "GET", "/v1/status")
        memory = status["memory"]
        assert (memory["budget_bytes"], memory["configured_budget_bytes"]) == (usable, usable)
        assert (memory["budget_automatic"], memory["budget_clamped"]) == (True, False)
    finally:
        await server.shutdown()


@pytest.mark.slow
async def test_a_budget_larger_than_the_host_has_is_clamped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # 64 GiB set for a larger host, on a 24 GiB host (a CI machine): it starts, with the budget
    # clamped to MemAvailable (20 GiB) less the reserve (2.4 GiB, 10% of MemTotal).
    host = fake_host(tmp_path / "host", total=24 * GIB, available=20 * GIB)
    env = {"PACER_MEMORY__PARTITION_BYTES": "1GiB", "PACER_SYNTHESIS__CORES": "64",
           "PACER_MEMORY__BUDGET_BYTES": "64GiB"}  # fmt: skip
    server = Server(
        Service.build(settings_for(tmp_path, **env), CollectorRegistry(), host_files=host)
    )
    with caplog.at_level(logging.WARNING):
        await server.service.open()  # the plan is fitted to the host before anything is built on it
        await server.start()
    try:
        usable = 20 * GIB - 24 * GIB // 10
        [warning] = memory_warnings(caplog)
        assert "PACER_MEMORY__BUDGET_BYTES=68719476736, 64.0 GiB" in warning
        assert "MemAvailable is 20.0 GiB; less the reserve of 2.4 GiB" in warning
        assert "PACER_MEMORY__HOST_RESERVE_BYTES) that leaves 17.6 GiB" in warning
        assert "17 partitions of 1.0 GiB in flight instead of 64" in warning
        assert server.service.pipeline.budget_bytes == usable
        # The policy dispatches by the budget in effect: 17 partitions, not 64.
        assert server.service.plan.caps.inflight_partitions == 17
        assert server.service.pipeline.controller is server.service.policy
        assert server.service.controller.bootstrap_depth == 15  # 90% of 17
        _, status = await call(server, "GET", "/v1/status")
        memory = status["memory"]
        assert (memory["budget_bytes"], memory["configured_budget_bytes"]) == (usable, 64 * GIB)
        assert memory["budget_clamped"] is True
        assert memory["caps"]["inflight_partitions"] == 17
        assert server.service.registry.get_sample_value("pacer_memory_budget_bytes") == usable
        status_code, body = await call(server, "POST", "/v1/jobs", {"partitions": 3})
        assert status_code == 202
        assert (await until_done(server, body["id"]))["state"] == "completed"
    finally:
        await server.shutdown()


@pytest.mark.slow
async def test_a_cgroup_limit_tighter_than_mem_available_clamps_the_budget_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A pod limited to 16 GiB, 4 GiB of it in use, on a host with 700 GiB available: the
    # pod's memory.max binds, and the default reserve is a tenth of it (1.6 GiB).
    limits: dict[str, tuple[int | str, int]] = {
        "/kubepods": ("max", 100 * GIB),
        "/kubepods/pod1": (16 * GIB, 4 * GIB),
    }
    host = fake_host(tmp_path / "host", total=755 * GIB, available=700 * GIB,
                     cgroup="/kubepods/pod1/ctr", limits=limits)  # fmt: skip
    env = {"PACER_MEMORY__PARTITION_BYTES": "1GiB", "PACER_SYNTHESIS__CORES": "64",
           "PACER_MEMORY__BUDGET_BYTES": "64GiB"}  # fmt: skip
    server = Server(
        Service.build(settings_for(tmp_path, **env), CollectorRegistry(), host_files=host)
    )
    with caplog.at_level(logging.WARNING):
        await server.start()
    try:
        usable = 12 * GIB - 16 * GIB // 10
        [warning] = memory_warnings(caplog)
        assert (
            "the cgroup /kubepods/pod1 has 12.0 GiB left under its memory.max of 16.0 GiB "
            "(memory.current 4.0 GiB), less than MemAvailable (700.0 GiB); less the reserve of "
            "1.6 GiB (PACER_MEMORY__HOST_RESERVE_BYTES) that leaves 10.4 GiB"
        ) in warning
        assert "10 partitions of 1.0 GiB in flight instead of 64" in warning
        assert server.service.pipeline.budget_bytes == usable
        _, status = await call(server, "GET", "/v1/status")
        memory = status["memory"]
        assert memory["budget_clamped"] is True
        assert memory["host_usable_bytes"] == usable
        assert memory["host_usable_bound"] == "memory.max of /kubepods/pod1"
        assert memory["cgroup_path"] == "/kubepods/pod1"
        assert (memory["cgroup_max_bytes"], memory["cgroup_current_bytes"]) == (16 * GIB, 4 * GIB)
        assert status["plan"]["host_usable_bound"] == "memory.max of /kubepods/pod1"
    finally:
        await server.shutdown()


@pytest.mark.slow
async def test_a_host_without_room_for_one_partition_refuses_to_start(tmp_path: Path) -> None:
    host = fake_host(tmp_path / "host", total=24 * GIB, available=3 * GIB)
    env = {"PACER_MEMORY__PARTITION_BYTES": "1GiB", "PACER_MEMORY__HOST_RESERVE_BYTES": "2.5GiB"}
    server = Server(
        Service.build(settings_for(tmp_path, **env), CollectorRegistry(), host_files=host)
    )
    try:
        with pytest.raises(ConfigurationError) as refused:
            await server.start()
        assert str(refused.value) == (
            "the host cannot hold one partition of 1.0 GiB: MemAvailable is 3.0 GiB; less the "
            "reserve of 2.5 GiB (PACER_MEMORY__HOST_RESERVE_BYTES) that leaves 512.0 MiB; free "
            "memory on the host or lower PACER_MEMORY__HOST_RESERVE_BYTES"
        )
    finally:
        await server.shutdown()


@pytest.mark.slow
async def test_a_pinned_pool_larger_than_the_host_has_refuses_to_start(tmp_path: Path) -> None:
    # 8 slots of 24 KiB (192 KiB) within a 1 MiB budget; the host has 100 KiB beyond the reserve.
    host = fake_host(tmp_path / "host", total=GIB, available=2**20 + 100 * 2**10)
    env = {**GPU_PATH, "PACER_GPU__POOL_SLOTS": "8", "PACER_MEMORY__BUDGET_BYTES": "1MiB",
           "PACER_MEMORY__HOST_RESERVE_BYTES": "1MiB"}  # fmt: skip
    server = Server(
        Service.build(settings_for(tmp_path, **env), CollectorRegistry(), host_files=host)
    )
    try:
        with pytest.raises(ConfigurationError) as refused:
            await server.start()
        assert str(refused.value) == (
            "the pinned pool of 8 slots × 24.0 KiB = 192.0 KiB (PACER_GPU__POOL_SLOTS=8) does not "
            "fit the host: MemAvailable is 1.1 MiB; less the reserve of 1.0 MiB "
            "(PACER_MEMORY__HOST_RESERVE_BYTES) that leaves 100.0 KiB. Pinned memory cannot be "
            "swapped: allocating it would take the host into the OOM killer. Lower "
            "PACER_GPU__POOL_SLOTS or PACER_MEMORY__BUDGET_BYTES, or free memory on the host"
        )
        steps = server.service.first_steps  # refused before the pool began: nothing pinned
        assert steps.preparing is None
        assert steps.lock is not None
        assert not steps.lock.held  # given back: a corrected start need not wait for this one
    finally:
        await server.shutdown()


@pytest.mark.slow
async def test_a_pool_sized_from_a_clamped_budget_fits_the_host(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The budget (1 MiB, 42 slots) is clamped to the 5 slots the host has room for, and the pool
    # sized from it (PACER_GPU__POOL_SLOTS=0) is pinned within that.
    host = fake_host(tmp_path / "host", total=GIB, available=2**20 + 5 * SLOT)
    env = {**GPU_PATH, "PACER_MEMORY__BUDGET_BYTES": "1MiB",
           "PACER_MEMORY__HOST_RESERVE_BYTES": "1MiB"}  # fmt: skip
    server = Server(
        Service.build(settings_for(tmp_path, **env), CollectorRegistry(), host_files=host)
    )
    with caplog.at_level(logging.WARNING):
        await server.start()
    try:
        assert any("is more than the host can give" in m for m in memory_warnings(caplog))
        pool = server.service.pipeline.pool
        assert pool is not None
        assert pool.slots_total == 5
        assert pool.total_bytes <= server.service.pipeline.budget_bytes
    finally:
        await server.shutdown()


@pytest.mark.slow
async def test_without_meminfo_the_budget_stays_as_configured_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "no-meminfo"
    files = HostFiles(meminfo=missing)
    server = Server(Service.build(settings_for(tmp_path), CollectorRegistry(), host_files=files))
    with caplog.at_level(logging.WARNING):
        await server.start()
    try:
        [warning] = memory_warnings(caplog)
        assert warning.startswith("cannot read the host's memory ([Errno 2]")
        assert "PACER_MEMORY__BUDGET_BYTES) is not checked against it" in warning
        assert server.service.pipeline.budget_bytes == 64 * GIB
        _, status = await call(server, "GET", "/v1/status")
        assert status["memory"]["host_available_bytes"] is None
    finally:
        await server.shutdown()
