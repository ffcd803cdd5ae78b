"""A workload for `pacer serve` in a child process that notes, when the HTTP server is first
imported there, whether the pool's prepare had begun: imports nothing of the server itself."""

from __future__ import annotations

import ctypes
import importlib.abc
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from gpu.workload import GpuNttWorkload
from pacer.config import Settings


class _Watch(importlib.abc.MetaPathFinder):
    """Notes, when ``aiohttp`` is first imported (the HTTP server), whether the pool's prepare
    had begun (its thread exists) and whether the journal had been opened (its file has more
    than the lock's creating it empty); into a file."""

    def __init__(self, record: Path, journal: Path) -> None:
        self.record, self.journal = record, journal

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> None:
        if name == "aiohttp" and not self.record.exists():
            threads = [thread.name for thread in threading.enumerate()]
            self.record.write_text(json.dumps({
                "preparing": any(name.startswith("pacer-prepare") for name in threads),
                "journal_opened": self.journal.exists() and self.journal.stat().st_size > 0,
            }))  # fmt: skip


def watched_workload(settings: Settings) -> GpuNttWorkload:
    """A pool of shared blocks and two synthesis processes, no provers (it proves nothing),
    with `_Watch` installed in this process, writing to ``$FIRST_STEPS_RECORD``."""
    sys.meta_path.insert(0, _Watch(Path(os.environ["FIRST_STEPS_RECORD"]),
                                   settings.journal.sqlite_path))  # fmt: skip
    return GpuNttWorkload(8, devices=[0], workers_per_device=1, on_empty="wait",
                          executor="processes", pool_backend="shared",
                          shm_dir=settings.gpu.shm_dir)  # fmt: skip


def signalled_workload(settings: Settings) -> GpuNttWorkload:
    """`watched_workload`, and a SIGTERM to this process while the first steps are taken:
    before the service's loop has taken the signals."""
    workload = watched_workload(settings)
    os.kill(os.getpid(), signal.SIGTERM)
    return workload


class _LikeLlvm:
    """What a library that handles signals itself does (LLVM does, within Numba and CUDA's
    runtime compiler): it saves the process's SIGTERM action when it loads, and puts it back
    later, from any thread, through libc."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._saved = ctypes.create_string_buffer(512)  # a struct sigaction, as it is
        if self._libc.sigaction(signal.SIGTERM, None, self._saved) != 0:
            raise OSError(ctypes.get_errno(), "sigaction")

    def put_back(self) -> None:
        if self._libc.sigaction(signal.SIGTERM, self._saved, None) != 0:
            raise OSError(ctypes.get_errno(), "sigaction")


def restoring_workload(settings: Settings) -> GpuNttWorkload:
    """`watched_workload` whose prepare, beside which the service takes the signals, puts back
    the SIGTERM action found while the first steps were taken, once the service has taken
    them."""
    library, workload = _LikeLlvm(), watched_workload(settings)
    held = signal.getsignal(signal.SIGTERM)
    prepare = workload.prepare

    def prepare_then_put_back(*args: Any) -> None:
        prepare(*args)
        deadline = time.monotonic() + 30
        while signal.getsignal(signal.SIGTERM) is held and time.monotonic() < deadline:
            time.sleep(0.01)  # until the service's loop has taken the signals
        library.put_back()

    workload.prepare = prepare_then_put_back  # type: ignore[method-assign, assignment]
    return workload
