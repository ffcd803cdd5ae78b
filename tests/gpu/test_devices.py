"""The one answer to "is there CUDA here": the driver asked, CuPy required but not imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpu.cuda.devices import device_count, device_name
from tests.servers import ROOT


def test_no_device_and_no_name_without_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    assert device_count() == 0
    assert device_name(0) == "unknown"


def _with_cupy_installed(tmp_path: Path, script: str, returncode: int = 0) -> str:
    """What ``script`` prints, run where CuPy is installed (a stand-in: importing it fails)."""
    ran = _run_with_cupy_installed(tmp_path, script)
    assert ran.returncode == returncode, ran.stderr
    return ran.stdout.strip()


def _run_with_cupy_installed(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "cupy"
    fake.mkdir()
    (fake / "__init__.py").write_text('raise ImportError("CuPy is looked up, not imported")\n')
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=60)  # fmt: skip


@pytest.mark.slow
def test_the_devices_are_counted_and_named_without_importing_cupy(tmp_path: Path) -> None:
    """CuPy installed is looked up, not imported: its import costs a second or so on a GPU
    host, before the pool is pinned."""
    script = (
        "import sys\n"
        "from gpu.cuda.devices import device_count, device_name\n"
        "device_count(), device_name(0)\n"
        "print('cupy' in sys.modules)\n"
    )
    assert _with_cupy_installed(tmp_path, script) == "False"


# A CUDA driver with two devices that says which threads started it.
FAKE_DRIVER = """
import ctypes, sys, threading
started = []
class Driver:
    def cuInit(self, flags):
        started.append(threading.current_thread().name)
        return 0
    def cuDeviceGetCount(self, count):
        count._obj.value = 2
        return 0
ctypes.CDLL = lambda name: Driver()
"""


@pytest.mark.parametrize(
    ("command", "starter"), [("serve", "pacer-cuda-driver"), ("config", "MainThread")]
)
@pytest.mark.slow
def test_pacer_serve_starts_the_driver_beside_its_imports_once(
    tmp_path: Path, command: str, starter: str
) -> None:
    """cuInit (0.2 s on an H200 host) begins as `pacer serve`'s imports do, on a thread of its
    own; the first steps' `device_count` finds the driver started, without starting it again.
    Another command starts it only where it asks."""
    arguments = ["serve", "--port", "70000"] if command == "serve" else [command]
    script = FAKE_DRIVER + (  # `pacer serve` refuses the port once its imports are done
        "import contextlib, io\n"
        "from pacer.__main__ import main\n"
        "quiet = io.StringIO()\n"
        "with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):\n"
        f"    main({arguments!r})\n"
        "from gpu.cuda.devices import device_count\n"
        "print(device_count(), started)\n"
    )
    assert _with_cupy_installed(tmp_path, script) == f"2 [{starter!r}]"


@pytest.mark.gpu
def test_the_driver_sees_the_devices_cupy_sees(cupy_module: Any) -> None:
    runtime = cupy_module.cuda.runtime
    assert device_count() == runtime.getDeviceCount()
    for device in range(device_count()):
        name = runtime.getDeviceProperties(device)["name"]
        assert device_name(device) == (name.decode() if isinstance(name, bytes) else name)
    assert device_name(device_count()) == "unknown"


@pytest.mark.slow
def test_a_process_that_ends_during_the_drivers_start_waits_for_it(tmp_path: Path) -> None:
    """`pacer serve` refusing its settings ends at once; the driver's exit handlers must not
    run while another thread is inside cuInit."""
    script = (
        "import ctypes, sys, threading\n"
        "exiting = threading.Event()\n"
        "class Driver:\n"
        "    def cuInit(self, flags):\n"
        "        exiting.wait()\n"
        "        print('started', flush=True)\n"
        "        return 0\n"
        "ctypes.CDLL = lambda name: Driver()\n"
        "from gpu.cuda.devices import begin_driver_start\n"
        "begin_driver_start()\n"
        "exiting.set()\n"
        "sys.exit(2)\n"
    )
    assert _with_cupy_installed(tmp_path, script, returncode=2) == "started"


@pytest.mark.slow
def test_a_driver_that_hangs_in_its_start_holds_the_exit_only_so_long(tmp_path: Path) -> None:
    script = (
        "import ctypes, sys, threading\n"
        "class Driver:\n"
        "    def cuInit(self, flags):\n"
        "        threading.Event().wait()  # a device fallen off the bus\n"
        "ctypes.CDLL = lambda name: Driver()\n"
        "from gpu.cuda import devices\n"
        "devices.EXIT_WAIT_S = 0.1\n"
        "devices.begin_driver_start()\n"
        "sys.exit(2)\n"
    )
    ran = _run_with_cupy_installed(tmp_path, script)
    assert ran.returncode == 2, ran.stderr
    assert "the CUDA driver's start (cuInit) has not ended after 0 s" in ran.stderr
