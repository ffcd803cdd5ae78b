"""The service's GPU path end to end without a GPU: the GPU workload with its pool in shared
memory and synthesis in worker processes, proving through a NumPy stand-in for the CUDA prover
(the one part CI cannot have). Digests are recomputed here; metrics carry one GPU label for
two workers on one device."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from gpu.cuda.ntt import GPU_PHASES
from gpu.cuda.prover import GpuResult
from gpu.field.prime import PrimeField
from gpu.reference.digest import digest
from gpu.reference.ntt import HSteps, compute_h
from gpu.reference.synthesis import synthesize
from gpu.workload import GpuNttWorkload
from pacer.config import Settings
from pacer.server import Server
from pacer.service.lifecycle import Service
from tests.servers import call, settings_for, until_done

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]
LOG_N = 10


class NumpyProver:
    """`gpu.cuda.prover.GpuProver`'s interface on the CPU."""

    def __init__(self, field: PrimeField) -> None:
        self.field = field
        self.steps = HSteps(LOG_N, field)
        self.kept = 0

    def prove(self, a: Any, b: Any, c: Any, *, keep_h: bool = False) -> GpuResult:
        started = time.perf_counter()
        h = self.steps.run(*(v.astype(np.uint64) for v in (a, b, c)))
        phases = dict.fromkeys(GPU_PHASES, (time.perf_counter() - started) / len(GPU_PHASES))
        self.kept += keep_h
        return GpuResult(digest(h, field=self.field), h if keep_h else None, phases)


def shared_gpu_workload(settings: Settings) -> GpuNttWorkload:
    workload = GpuNttWorkload(
        LOG_N, devices=[3], workers_per_device=2, on_empty="wait", executor="processes",
        pool_backend="shared", keep_pool=settings.gpu.keep_pool, shm_dir=settings.gpu.shm_dir,
    )  # fmt: skip
    workload._provers = {worker: NumpyProver(workload.field) for worker in range(workload.workers)}
    return workload


async def started_service(tmp_path: Path, **env: str) -> tuple[Server, GpuNttWorkload]:
    """A started service on `shared_gpu_workload` with two synthesis processes."""
    settings = settings_for(
        tmp_path,
        PACER_WORKLOAD="tests.service.test_gpu_path:shared_gpu_workload",
        PACER_SYNTHESIS__CORES="2",
        **env,
    )
    server = Server(Service.build(settings, CollectorRegistry()))
    await server.start()
    assert isinstance(server.service.workload, GpuNttWorkload)
    return server, server.service.workload


async def test_partitions_synthesized_in_processes_prove_and_verify(tmp_path: Path) -> None:
    # Threads enough to verify the three due at once: none is skipped (D201).
    server, workload = await started_service(
        tmp_path, PACER_VERIFY_EVERY="3", PACER_VERIFY_THREADS="2"
    )
    try:
        pool = workload.pool
        assert pool is not None
        assert server.service.pipeline.pool is pool
        assert pool.backend == "shared"
        assert pool.slots_total == server.service.plan.pool_slots
        status, body = await call(
            server, "POST", "/v1/jobs", {"partitions": 9, "params": {"seed": 4}}
        )
        assert status == 202
        job = await until_done(server, body["id"])
        assert job["state"] == "completed", job.get("error")
        for part in job["partition_results"]:
            field = workload.field
            vectors = synthesize(4, part["index"], LOG_N, field=field)
            assert part["digest"] == digest(compute_h(*vectors, field=field), field=field)
            assert part["gpu"] == 3  # the device, not the worker
        provers = workload._provers.values()
        assert sum(p.kept for p in provers) == 3  # H came back only for the verified ones
        assert server.service.pipeline.verifications_skipped == 0
        assert server.service.plan.verify_threads == 2
        _, metrics = await call(server, "GET", "/metrics")
        assert 'pacer_gpu_busy_seconds_total{gpu="3"}' in metrics
        assert 'gpu="0"' not in metrics
        assert 'gpu="1"' not in metrics
        assert pool.allocations_after_warmup == 0
        assert pool.slots_free == pool.slots_total
    finally:
        await server.shutdown()
    assert pool.closed


async def test_a_budget_too_small_for_the_cores_is_logged_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    slot = 3 * 8 << LOG_N  # a, b, c of Goldilocks
    with caplog.at_level(logging.WARNING, logger="pacer.service"):
        server, _ = await started_service(tmp_path, PACER_MEMORY__BUDGET_BYTES=str(3 * slot))
    try:
        pool = server.service.pipeline.pool
        assert pool is not None
        assert pool.slots_total == 3
        wanted = server.service.plan.pool_slots_wanted
        assert wanted > 3
        assert f"holds 3 partitions of 0.00 GiB, fewer than the {wanted}" in caplog.text
        assert "PACER_MEMORY__BUDGET_BYTES" in caplog.text
    finally:
        await server.shutdown()


async def test_a_killed_synthesis_process_is_replaced_and_the_job_completes(
    tmp_path: Path,
) -> None:
    server, workload = await started_service(tmp_path)
    try:
        assert workload._synthesizer is not None
        for worker in list(workload._synthesizer._executor._processes.values()):
            # The OOM killer, between partitions; the executor may end the others first.
            assert worker.pid is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGKILL)
            worker.join()
        status, body = await call(server, "POST", "/v1/jobs", {"partitions": 4})
        assert status == 202
        job = await until_done(server, body["id"])
        assert job["state"] == "completed", job.get("error")
        _, metrics = await call(server, "GET", "/metrics")
        assert "pacer_synthesis_worker_restarts_total 1.0" in metrics
        _, status = await call(server, "GET", "/v1/status")
        synthesis = status["synthesis"]
        assert {k: synthesis[k] for k in ("executor", "kernel", "restarts")} == {
            "executor": "processes", "kernel": "numpy", "restarts": 1}  # fmt: skip
        assert 0 < synthesis["busy_ratio"] <= 1
        assert synthesis["busy_seconds"] > 0
        assert status["pool"]["backend"] == "shared"
    finally:
        await server.shutdown()
