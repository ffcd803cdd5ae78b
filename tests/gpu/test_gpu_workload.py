"""The ntt workload on CUDA GPUs, from the pinned pool (device tests marked `gpu`)."""

from __future__ import annotations

import threading

import pytest

from gpu.cuda.ntt import GPU_PHASES
from gpu.reference import cpu_backend
from gpu.workload import GpuNttWorkload, NttWorkload, gpu_devices
from pacer.config import Settings
from pacer.workload import PartitionSpec, PooledWorkload, WorkloadError, load_workload, pooled


def test_devices_none_proves_on_the_cpu() -> None:
    assert gpu_devices("none") == []
    workload = load_workload(Settings(gpu={"devices": "none"}))
    assert type(workload) is NttWorkload
    assert pooled(workload) is None  # on the CPU: no pinned pool


def test_a_missing_device_is_refused() -> None:
    with pytest.raises(WorkloadError, match="PACER_GPU__DEVICES=99: device 99 is not present"):
        gpu_devices("99")


def test_bad_devices_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="String should match pattern"):
        Settings(gpu={"devices": "first"})


@pytest.mark.gpu
@pytest.mark.parametrize("field", ["goldilocks", "babybear"])
def test_gpu_workload_proves_from_the_pool_like_the_cpu(field: str) -> None:
    devices = gpu_devices("all")
    if not devices:
        pytest.skip("no CUDA device")
    settings = Settings(ntt={"log_n": 12, "field": field}, gpu={"workers_per_device": 2})
    workload = load_workload(settings)
    assert isinstance(workload, GpuNttWorkload)
    assert workload.workers == 2 * len(devices)
    workload.prepare(slots=4, budget_bytes=2**30, synthesis_workers=1)
    try:
        pool = workload.pool
        assert pool is not None
        assert pool.slot_bytes == workload.partition_bytes({})
        cpu = NttWorkload(12, field)
        for index in range(6):
            spec = PartitionSpec("job", index, 11, {})
            slot = workload.synthesize(spec)
            assert slot.pinned
            proof = workload.prove(slot, worker=index % 2)
            assert workload.verify(spec, slot, proof)
            reference = cpu.prove(cpu.synthesize(spec), 0)
            assert proof.digest == reference.digest  # the same H, bit for bit
            assert tuple(proof.phases_s) == GPU_PHASES
            workload.release(slot)
        assert pool.in_use_bytes == 0
        assert pool.checkouts == 6
        assert pool.allocations_after_warmup == 0
        with pytest.raises(ValueError, match=r"params\.log_n: must equal PACER_NTT__LOG_N"):
            workload.check_params({"log_n": 14})
    finally:
        workload.close()


def test_each_workload_has_its_default_field_and_sizes_partitions_by_it() -> None:
    cpu = NttWorkload(12)
    gpu = GpuNttWorkload(12, [0], 1, "wait", pool_backend="shared")
    assert cpu.field.name == "babybear"
    assert gpu.field.name == "goldilocks"
    assert gpu.partition_bytes({}) == 3 * 8 * 2**12
    assert GpuNttWorkload(12, [0], 1, "wait", field="babybear").partition_bytes({}) == 3 * 4 * 2**12


def test_a_size_past_the_fields_domains_is_refused_naming_the_setting() -> None:
    with pytest.raises(
        WorkloadError, match=r"PACER_NTT__LOG_N=28: babybear's largest domain is 2\^27"
    ):
        NttWorkload(28)
    assert NttWorkload(28, "goldilocks").log_n == 28


def test_the_gpu_workload_is_pooled_and_says_what_the_plan_reads() -> None:
    gpu = GpuNttWorkload(12, [0, 1], 2, "wait", pool_backend="shared")
    assert isinstance(gpu, PooledWorkload)
    assert pooled(gpu) is gpu
    assert (gpu.workers, gpu.device_of(3), gpu.verify_every, gpu.executor) == (4, 1, 100, "threads")
    assert (gpu.field_name, gpu.log_n, gpu.kernel) == ("goldilocks", 12, "numpy")
    assert gpu.pool is None  # until prepare


def test_a_size_past_the_chosen_fields_domains_is_refused_at_load() -> None:
    settings = Settings(gpu={"devices": "none"}, ntt={"field": "babybear", "log_n": 28})
    with pytest.raises(WorkloadError, match=r"PACER_NTT__LOG_N=28: babybear's largest domain"):
        load_workload(settings)


def threads_workload(shm_dir: str) -> GpuNttWorkload:
    return GpuNttWorkload(10, [0], 1, "wait", pool_backend="shared", backend="numba",
                          shm_dir=shm_dir)  # fmt: skip


@pytest.mark.skipif(not cpu_backend.numba_available(), reason="Numba is not installed")
def test_prepare_does_not_wait_for_this_processes_compiled_kernels(
    monkeypatch: pytest.MonkeyPatch, shm_dir: str
) -> None:
    # Seconds of loading that made them the last part of a restart's prepare: only a
    # verification, or a synthesis here, needs them.
    loading = threading.Event()
    monkeypatch.setattr(cpu_backend, "warm", lambda *_, **__: loading.wait(30))
    workload = threads_workload(shm_dir)
    workload.prepare(slots=1, budget_bytes=2**30, synthesis_workers=1)
    try:
        assert workload._kernels_loaded is not None
        assert not workload._kernels_loaded.done()
        assert "kernels" not in workload.prepare_phases_s
        loading.set()
        workload._compiled()
        assert "kernels" in workload.prepare_phases_s
    finally:
        loading.set()
        workload.close()


@pytest.mark.skipif(not cpu_backend.numba_available(), reason="Numba is not installed")
def test_this_processes_kernels_begin_loading_once_the_pool_is_pinned(
    monkeypatch: pytest.MonkeyPatch, shm_dir: str
) -> None:
    # Loaded beside the pinning they slowed it by a third on an H200 host.
    seen: list[object] = []
    workload = threads_workload(shm_dir)
    monkeypatch.setattr(cpu_backend, "warm", lambda *_, **__: seen.append(workload.pool))
    workload.prepare(slots=1, budget_bytes=2**30, synthesis_workers=1)
    try:
        workload._compiled()
        assert workload.pool is not None
        assert seen == [workload.pool]
    finally:
        workload.close()


@pytest.mark.skipif(not cpu_backend.numba_available(), reason="Numba is not installed")
def test_a_synthesis_here_waits_for_the_kernels_and_fails_with_them(
    monkeypatch: pytest.MonkeyPatch, shm_dir: str
) -> None:
    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("the kernels did not load")

    monkeypatch.setattr(cpu_backend, "warm", broken)
    workload = threads_workload(shm_dir)
    workload.prepare(slots=1, budget_bytes=2**30, synthesis_workers=1)
    try:
        with pytest.raises(RuntimeError, match="the kernels did not load"):
            workload.synthesize(PartitionSpec("job", 0, 11, {}))
        assert workload.pool is not None
        assert workload.pool.in_use_bytes == 0  # the slot went back
    finally:
        workload.close()
