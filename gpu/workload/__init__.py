"""The ntt workload: ``PACER_WORKLOAD=gpu.workload:ntt`` (the default; ``ntt`` for short).

The Groth16 "H" computation over a prime field (`gpu.reference.ntt`): synthesis draws a, b and
c = a∘b on a domain of 2^log_n; proving interpolates, evaluates on a coset, divides by the
vanishing polynomial and interpolates back; verification checks H(r)·Z(r) = A(r)·B(r) − C(r)
at a random point. `ntt` proves on the CUDA GPUs ``PACER_GPU__DEVICES`` selects
(`GpuNttWorkload`, `gpu.workload.pooled`), or on the CPU with NumPy where there are none
(`NttWorkload`, `gpu.workload.cpu`).

This package is the adapter between pacer and the device code: the one part of ``gpu`` that
imports pacer (its Workload contract and settings), and that names pacer's settings.
"""

from __future__ import annotations

from gpu.workload.cpu import NttWorkload, cpu_backend_for
from gpu.workload.pooled import GpuNttWorkload
from pacer.config import Settings
from pacer.workload import WorkloadError

__all__ = ["GpuNttWorkload", "NttWorkload", "cpu_backend_for", "gpu_devices", "ntt"]


def gpu_devices(setting: str) -> list[int]:
    """The CUDA devices ``PACER_GPU__DEVICES`` selects among those present."""
    if setting == "none":
        return []
    from gpu.cuda.devices import device_count

    present = device_count()
    if setting == "all":
        return list(range(present))
    wanted = [int(part) for part in setting.split(",")]
    missing = [d for d in wanted if d >= present]
    if missing:
        raise WorkloadError(
            f"PACER_GPU__DEVICES={setting}: device {missing[0]} is not present ({present} visible)"
        )
    return wanted


def ntt(settings: Settings) -> NttWorkload:
    """The factory ``PACER_WORKLOAD=gpu.workload:ntt`` names: on the GPUs when there are any,
    else on the CPU; an unset ``PACER_NTT__LOG_N`` or ``PACER_NTT__FIELD`` takes the default
    of the one chosen."""
    devices = gpu_devices(settings.gpu.devices)
    if devices:
        return GpuNttWorkload(settings.ntt.log_n or GpuNttWorkload.DEFAULT_LOG_N, devices,
                              settings.gpu.workers_per_device, settings.gpu.pool_on_empty,
                              settings.synthesis.executor, field=settings.ntt.field,
                              backend=settings.ntt.cpu_backend,
                              keep_pool=settings.gpu.keep_pool,
                              shm_dir=settings.gpu.shm_dir)  # fmt: skip
    return NttWorkload(settings.ntt.log_n or NttWorkload.DEFAULT_LOG_N, settings.ntt.field,
                       settings.ntt.cpu_backend)  # fmt: skip
