"""The examples in docstrings run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "pacer.attempts",
    "pacer.admission",
    "pacer.backlog",
    "pacer.host_memory",
    "pacer.cgroup_memory",
    "pacer.ranges",
    "pacer.baselines",
    "pacer.controller",
    "pacer.supervision",
    "pacer.journal_health",
    "pacer.estimates",
    "pacer.plan",
    "pacer.policies",
    "pacer.windows",
    "pacer.pi_law",
    "pacer.rate_dispatch",
    "pacer.bootstrap",
    "pacer.table",
    "pacer.threads",
    "pacer.settle.detector",
    "pacer.settle.cli",
    "pacer.service.startup",
    "pacer.strict_json",
    "pacer.client",
    "pacer.cli_args",
    "pacer.cli_client",
    "pacer.api.inputs",
    "pacer.api.views",
    "gpu.allocators",
    "gpu.block_maps",
    "gpu.cuda_kernels",
    "gpu.digest",
    "gpu.fdstore",
    "gpu.field",
    "gpu.lifeline",
    "gpu.ntt",
    "gpu.pool",
    "gpu.pool_record",
    pytest.param("gpu.process_executor", marks=pytest.mark.slow),  # synthesis processes
    "gpu.shm_blocks",
    "gpu.sizes",
    "gpu.slots",
    "gpu.synthesis",
    "gpu.verification",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
