"""What the host gives pacer: CPU cores for synthesis, memory, GPUs and the pinned pool, and
the built-in workload's field and size (``PACER_SYNTHESIS__*``, ``PACER_MEMORY__*``,
``PACER_GPU__*``, ``PACER_NTT__*``)."""

from __future__ import annotations

import os
from typing import Literal, Self

from pydantic import ByteSize, Field, field_validator, model_validator

from pacer.config.section import Section


class SynthesisSettings(Section):
    """What the host can give to CPU synthesis."""

    cores: int = Field(
        default_factory=lambda: os.cpu_count() or 1,
        ge=1,
        le=65536,
        description="CPU cores available to synthesis (cores; default: all of this host)",
    )
    threads_per_synthesis: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Threads one synthesis keeps busy; unset: what the workload says (1 for "
        "ntt and noop), else 4 (threads)",
    )
    executor: Literal["threads", "processes"] = Field(
        "processes",
        description="Where the GPU path's synthesis runs: worker processes writing into shared "
        "pool slots pinned with cudaHostRegister (no GIL between them; the pool must fit in "
        "/dev/shm), or threads of the service (processes/threads)",
    )
    max_concurrent: int | None = Field(
        None,
        ge=1,
        le=65536,
        description="Most syntheses running at once; unset: what the cores allow, cores ÷ "
        "threads per synthesis (partitions)",
    )


class MemorySettings(Section):
    """The host-memory budget every in-flight partition is counted against."""

    budget_bytes: ByteSize = Field(
        ByteSize(0),
        ge=0,
        le=2**50,
        description="Host memory for partitions from dispatch until their GPU copy ends, at "
        "most 1 PiB; 0: what the host gives at start, MemAvailable (or the room the cgroup's "
        "memory.max leaves, where less) less the reserve (bytes; units such as 700GiB "
        "accepted)",
    )
    partition_bytes: ByteSize = Field(
        ByteSize(0),
        ge=0,
        le=2**50,
        description="Host memory one partition holds, its a, b and c buffers; 0: the size the "
        "workload reports (bytes; units accepted)",
    )
    host_reserve_bytes: ByteSize = Field(
        ByteSize(0),
        ge=0,
        le=2**50,
        description="Host memory left to everything else: at start the budget is clamped to "
        "MemAvailable (or the room the cgroup's memory.max leaves, where less) less this, and a "
        "pinned pool larger than that refuses to start; 0: 10% of MemTotal (or of memory.max, "
        "where less), at most 8 GiB (bytes; units accepted)",
    )

    @model_validator(mode="after")
    def _partition_fits(self) -> Self:
        if self.budget_bytes and self.partition_bytes > self.budget_bytes:
            raise ValueError(
                f"partition_bytes ({int(self.partition_bytes)}) must not exceed "
                f"budget_bytes ({int(self.budget_bytes)})"
            )
        return self


class GpuSettings(Section):
    """The proving workers and, with CUDA, the devices and the pinned pool."""

    workers: int = Field(
        1,
        ge=1,
        le=256,
        description="Proving workers in total when proving on the CPU (workers)",
    )
    devices: str = Field(
        "all",
        pattern=r"^(all|none|\d+(,\d+)*)$",
        description="GPUs to prove on: all, none (prove on the CPU) or indices such as 0,1 "
        "(devices)",
    )
    workers_per_device: int = Field(
        2,
        ge=1,
        le=8,
        description="Proving workers (each with its own stream) per GPU; two overlap one "
        "partition's copy with another's kernels (workers)",
    )
    pool_slots: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="Partitions the pinned host-memory pool holds; 0: one per synthesis the "
        "cores allow, plus twice target_ready, plus one per proving worker, within the memory "
        "budget (partitions)",
    )
    pool_on_empty: Literal["wait", "fallback"] = Field(
        "wait",
        description="When every pinned slot is taken: wait for one, or fall back to pageable "
        "memory (wait/fallback)",
    )
    keep_pool: bool = Field(
        False,
        description="On a clean stop (SIGTERM), leave the pinned pool's shared-memory blocks "
        "for the next pacer on this host to adopt instead of freeing them: a restart then "
        "skips pinning; under systemd with FileDescriptorStoreMax= they are kept in its "
        "descriptor store, else in shm_dir (true/false)",
    )
    shm_dir: str = Field(
        "/dev/shm",
        description="The tmpfs directory where a shared pool's blocks (pacer-pool-<pid>-<n>) "
        "and owner records (pacer-pool.<pid>-<n>.json) live; it must be a tmpfs such as "
        "/dev/shm or a directory in one, and exist; pacers that hand a pool over, and pacer "
        "settle (--shm-dir), must name the same one (absolute path)",
    )

    @field_validator("shm_dir")
    @classmethod
    def _absolute_path(cls, value: str) -> str:
        if not os.path.isabs(value):
            raise ValueError("must be an absolute path, such as /dev/shm")
        return os.path.normpath(value)


class NttSettings(Section):
    """The ntt workload (`gpu.workload`): the Groth16 H computation over a prime field."""

    field: Literal["babybear", "goldilocks"] | None = Field(
        None,
        description="Prime field: goldilocks (p = 2^64 − 2^32 + 1, 8-byte elements, domains up "
        "to 2^32) or babybear (p = 15·2^27 + 1, 4-byte elements, domains up to 2^27); unset: "
        "goldilocks when proving on GPUs, babybear on the CPU (babybear/goldilocks)",
    )
    log_n: int | None = Field(
        None,
        ge=4,
        le=30,
        description="Partition size as log2 of the NTT domain, at most the field's two-adicity; "
        "unset: 27 when proving on GPUs (Goldilocks: 3 GiB of a, b, c and ~130 ms of an H200 "
        "per partition), 18 on the CPU; on the CPU jobs may override it with params.log_n "
        "(log2 of elements)",
    )

    cpu_backend: Literal["auto", "numba", "numpy"] = Field(
        "auto",
        description="How the ntt workload's CPU work, synthesis and verification, computes: "
        "compiled by Numba, holding no GIL (Goldilocks synthesis at 2.2 to 2.4 times NumPy's "
        "rate; pip install 'pacer[fast]', included in the gpu extras), or as whole-array NumPy "
        "calls; auto: numba where it is installed (auto/numba/numpy)",
    )
