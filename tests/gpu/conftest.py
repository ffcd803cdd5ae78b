"""Fixtures of the device tests (marked `gpu`)."""

from __future__ import annotations

from typing import Any

import pytest

from gpu.cuda.devices import device_count


@pytest.fixture(scope="session")
def cupy_module() -> Any:
    """CuPy, where it sees a CUDA device; the test is skipped elsewhere."""
    if device_count() == 0:
        pytest.skip("no CUDA device")
    import cupy

    return cupy
