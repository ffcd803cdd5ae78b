"""The examples in docstrings run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "bench.cpu_reference",
    "bench.fleet",
    "bench.fleet_commits",
    "bench.fleet_progress",
    "bench.gpu_arms",
    "bench.journal_trace",
    "bench.stats",
    "bench.suite_workers",
    "pacer.pipeline.attempts",
    "pacer.service.admission",
    "pacer.pipeline.backlog",
    "pacer.host.memory",
    "pacer.host.cgroup",
    "pacer.ranges",
    "pacer.control.baselines",
    "pacer.control.controller",
    "pacer.runtime.supervision",
    "pacer.journal.health",
    "pacer.control.estimates",
    "pacer.plan",
    "pacer.control.registry",
    "pacer.control.windows",
    "pacer.control.pi_law",
    "pacer.control.rate_dispatch",
    "pacer.control.model",
    "pacer.control.occupancy",
    "pacer.control.bootstrap",
    "pacer.cli.table",
    "pacer.sim.disturbances",
    "pacer.runtime.threads",
    "pacer.settle.detector",
    "pacer.settle.cli",
    "pacer.service.startup",
    "pacer.api.strict_json",
    "pacer.client.session",
    "pacer.client.blocking",
    "pacer.cli.args",
    "pacer.cli.jobs",
    "pacer.api.inputs",
    "pacer.api.views",
    "gpu.pool.allocators",
    "gpu.shm.block_maps",
    "gpu.cuda.kernels",
    "gpu.reference.digest",
    "gpu.shm.fdstore",
    "gpu.field.prime",
    "gpu.procs.lifeline",
    "gpu.reference.ntt",
    "gpu.pool.pinned",
    "gpu.shm.record",
    pytest.param("gpu.procs.executor", marks=pytest.mark.slow),  # synthesis processes
    "gpu.shm.blocks",
    "gpu.sizes",
    "gpu.pool.slots",
    "gpu.reference.synthesis",
    "gpu.reference.verification",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
