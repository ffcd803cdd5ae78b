"""The one answer to "is there CUDA here": the driver asked, CuPy required but not imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpu.devices import device_count, device_name
from tests.servers import ROOT


def test_no_device_and_no_name_without_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    assert device_count() == 0
    assert device_name(0) == "unknown"


def test_the_devices_are_counted_and_named_without_importing_cupy(tmp_path: Path) -> None:
    """CuPy installed (here a stand-in) is looked up, not imported: its import costs a second
    or so on a GPU host, before the pool is pinned."""
    fake = tmp_path / "cupy"
    fake.mkdir()
    (fake / "__init__.py").write_text('"""Stands in for CuPy: importing it is the fault."""\n')
    script = (
        "import sys\n"
        "from gpu.devices import device_count, device_name\n"
        "device_count(), device_name(0)\n"
        "print('cupy' in sys.modules)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=ROOT, env=env, timeout=60)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "False"


@pytest.mark.gpu
def test_the_driver_sees_the_devices_cupy_sees(cupy_module: Any) -> None:
    runtime = cupy_module.cuda.runtime
    assert device_count() == runtime.getDeviceCount()
    for device in range(device_count()):
        name = runtime.getDeviceProperties(device)["name"]
        assert device_name(device) == (name.decode() if isinstance(name, bytes) else name)
    assert device_name(device_count()) == "unknown"
