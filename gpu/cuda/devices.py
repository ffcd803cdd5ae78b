"""The CUDA devices this process can use, asked of the CUDA driver without importing CuPy.

`device_count` is the one answer to "is there CUDA here": 0 without CuPy, a driver or a device.
Importing CuPy takes a second or so, so the service asks here before the pool is pinned and
imports CuPy beside the pinning (docs/decisions/startup.md). The driver numbers devices as
CuPy does, ``CUDA_VISIBLE_DEVICES`` included.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import importlib.util
import logging
import threading

__all__ = ["begin_driver_start", "device_count", "device_name"]

DRIVER_LIBRARY = "libcuda.so.1"
_NAME_BYTES = 256
_SUCCESS = 0  # CUDA_SUCCESS


_starting = threading.Lock()
EXIT_WAIT_S = 30.0
"""How long a process that ends during `begin_driver_start`'s start waits for it (cuInit takes
seconds on a host of many GPUs without persistence mode)."""
logger = logging.getLogger("gpu.cuda.devices")


@functools.cache
def _started_driver() -> ctypes.CDLL | None:
    try:
        driver = ctypes.CDLL(DRIVER_LIBRARY)
    except OSError:
        return None
    return driver if driver.cuInit(0) == _SUCCESS else None


def _driver() -> ctypes.CDLL | None:
    """The CUDA driver, initialized once (cuInit); None where it cannot be loaded or started.

    A second thread that asks during the start waits for it.
    """
    with _starting:
        return _started_driver()


def begin_driver_start() -> threading.Thread:
    """Start the CUDA driver on its own thread, where CuPy is installed.

    A later `device_count` then finds it started (docs/decisions/startup.md, D123). A process that
    ends sooner waits for the start first, but only `EXIT_WAIT_S` for a driver hung in cuInit, with
    a warning.
    """
    thread = threading.Thread(target=_usable_driver, name="pacer-cuda-driver", daemon=True)
    thread.start()
    atexit.register(_waited_at_exit, thread)
    return thread


def _waited_at_exit(thread: threading.Thread) -> None:
    thread.join(EXIT_WAIT_S)
    if thread.is_alive():
        logger.warning("the CUDA driver's start (cuInit) has not ended after %.0f s: exiting "
                       "without it (is a device lost? see nvidia-smi and the kernel log)",
                       EXIT_WAIT_S)  # fmt: skip


def _usable_driver() -> ctypes.CDLL | None:
    """The driver where CuPy is installed (looked up, not imported), else None."""
    try:
        installed = importlib.util.find_spec("cupy") is not None
    except (ImportError, ValueError):
        installed = False
    return _driver() if installed else None


def device_count() -> int:
    """Visible CUDA devices; 0 without CuPy, a driver or a device."""
    driver = _usable_driver()
    count = ctypes.c_int(0)
    if driver is None or driver.cuDeviceGetCount(ctypes.byref(count)) != _SUCCESS:
        return 0
    return count.value


def device_name(device: int) -> str:
    """The model of CUDA device ``device`` ("NVIDIA H200"); "unknown" where it cannot be read."""
    driver = _usable_driver()
    if driver is None or not 0 <= device < device_count():
        return "unknown"
    handle = ctypes.c_int(0)
    name = ctypes.create_string_buffer(_NAME_BYTES)
    if driver.cuDeviceGet(ctypes.byref(handle), device) != _SUCCESS:
        return "unknown"
    if driver.cuDeviceGetName(name, _NAME_BYTES, handle) != _SUCCESS:
        return "unknown"
    return name.value.decode(errors="replace")
