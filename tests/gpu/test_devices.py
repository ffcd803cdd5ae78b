"""The one answer to "is there CUDA here", where CuPy is missing."""

from __future__ import annotations

import sys

import pytest

from gpu.devices import device_count, device_name


def test_no_device_and_no_name_without_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    assert device_count() == 0
    assert device_name(0) == "unknown"
