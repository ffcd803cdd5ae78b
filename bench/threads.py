"""Timing work that several threads do at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def timed_threads(jobs: list[Callable[[], object]]) -> float:
    """Runs each job on a thread of its own, all at once; seconds until the last one ends."""
    workers = [threading.Thread(target=job) for job in jobs]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - started
