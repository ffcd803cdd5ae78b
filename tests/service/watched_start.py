"""A workload for `pacer serve` in a child process that notes, when the HTTP server is first
imported there, whether the pool's prepare had begun: imports nothing of the server itself."""

from __future__ import annotations

import importlib.abc
import json
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from gpu.workload import GpuNttWorkload
from pacer.config import Settings


class _Watch(importlib.abc.MetaPathFinder):
    """Notes, when ``aiohttp`` is first imported (the HTTP server), whether the pool's prepare
    had begun (its thread exists) and whether the journal's file existed; into a file."""

    def __init__(self, record: Path, journal: Path) -> None:
        self.record, self.journal = record, journal

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> None:
        if name == "aiohttp" and not self.record.exists():
            threads = [thread.name for thread in threading.enumerate()]
            self.record.write_text(json.dumps({
                "preparing": any(name.startswith("pacer-prepare") for name in threads),
                "journal_existed": self.journal.exists(),
            }))  # fmt: skip


def watched_workload(settings: Settings) -> GpuNttWorkload:
    """A pool of shared blocks and two synthesis processes, no provers (it proves nothing),
    with `_Watch` installed in this process, writing to ``$FIRST_STEPS_RECORD``."""
    sys.meta_path.insert(0, _Watch(Path(os.environ["FIRST_STEPS_RECORD"]),
                                   settings.journal.sqlite_path))  # fmt: skip
    return GpuNttWorkload(8, devices=[0], workers_per_device=1, on_empty="wait",
                          executor="processes", pool_backend="shared")  # fmt: skip
