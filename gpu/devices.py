"""The CUDA devices this process can use, seen through CuPy (imported on call, never at import).

One answer to "is there CUDA here": `device_count`, 0 without CuPy, a driver or a device.
"""

from __future__ import annotations

__all__ = ["device_count", "device_name"]


def device_count() -> int:
    """Visible CUDA devices; 0 without CuPy, a driver or a device."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # ImportError, or CUDARuntimeError where there is no driver or device
        return 0


def device_name(device: int) -> str:
    """The model of CUDA device ``device`` ("NVIDIA H200"); "unknown" where it cannot be read."""
    if device_count() == 0:
        return "unknown"
    import cupy

    try:
        name = cupy.cuda.runtime.getDeviceProperties(device)["name"]
    except cupy.cuda.runtime.CUDARuntimeError:
        return "unknown"
    return name.decode() if isinstance(name, bytes) else str(name)
