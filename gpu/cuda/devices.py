"""The CUDA devices this process can use, asked of the CUDA driver without importing CuPy.

One answer to "is there CUDA here": `device_count`, 0 without CuPy, a driver or a device.
CuPy proves, so it must be installed, but importing it takes a second or so on a GPU host: the
service asks here before its pool is pinned (`gpu.workload.ntt`, the plan's GPU model), and
imports CuPy only beside the pinning (`gpu.workload.GpuNttWorkload.prepare`). The driver
(``libcuda.so.1``) numbers devices as CuPy's runtime does, ``CUDA_VISIBLE_DEVICES`` included.
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
    A second thread asking while the first starts it waits for that start."""
    with _starting:
        return _started_driver()


def begin_driver_start() -> threading.Thread:
    """Start the CUDA driver (where CuPy is installed) on a thread of its own, so that a later
    `device_count` finds it started: cuInit takes 0.2 s on an H200 host, which a start can
    spend beside its imports instead of after them. A process that ends sooner (a setting
    refused) waits for the start to end first, so the driver's exit handlers do not run beside
    it; but a driver that hangs in cuInit (a device fallen off the bus) is waited for only
    `EXIT_WAIT_S`, and a warning says so."""
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
