"""The examples in docstrings run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "pacer.baselines",
    "pacer.controller",
    "pacer.estimates",
    "pacer.table",
    "pacer.settle.detector",
    "gpu.field",
    "gpu.ntt",
    "gpu.pool",
    "gpu.synthesis",
    "gpu.ntt_cuda",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
