"""What the metrics read of a pinned host-memory pool (`PoolView`), and a pool of nothing."""

from __future__ import annotations

from typing import Protocol


class PoolView(Protocol):
    """What the metrics read of a pinned host-memory pool."""

    @property
    def total_bytes(self) -> int: ...

    @property
    def in_use_bytes(self) -> int: ...

    @property
    def waits(self) -> int: ...

    @property
    def fallbacks(self) -> int: ...


class NoPool:
    """The pool of a workload that pins nothing (the CPU workloads): all zero."""

    total_bytes = 0
    in_use_bytes = 0
    waits = 0
    fallbacks = 0
