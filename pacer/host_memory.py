"""The host's memory against what the service means to hold, read once at start.

MemAvailable (``/proc/meminfo``) is what the kernel can hand out without swapping. Less a
reserve for everything else on the host (the kernel, the service's own heap and threads, other
processes; ``PACER_MEMORY__HOST_RESERVE_BYTES``), it is what the service may use. The service
checks two figures against it at start (`pacer.service`): the pinned pool, allocated at once
and never swapped, must fit, or it refuses to start; the memory budget, the most that
in-flight partitions hold, is clamped to it, with a warning. This module reads and plans; it
raises nothing about settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MEMINFO = Path("/proc/meminfo")
RESERVE_DIVISOR = 10  # a tenth of MemTotal, when no reserve is set...
RESERVE_MAX_BYTES = 8 * 2**30  # ...and at most this


def meminfo_bytes(text: str) -> dict[str, int]:
    """The fields of /proc/meminfo's text, in bytes (``kB`` lines × 1024).

    >>> meminfo_bytes("MemTotal:       24684084 kB\\nHugePages_Total:       0\\n")
    {'MemTotal': 25276502016, 'HugePages_Total': 0}
    """
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return fields


@dataclass(frozen=True)
class HostMemory:
    """The host's memory at one instant (bytes). ``kept_bytes``: of the memory in use, a
    pinned pool the previous pacer kept for this one, which it adopts rather than allocates:
    not in MemAvailable, yet the service's to use."""

    total_bytes: int  # MemTotal
    available_bytes: int  # MemAvailable
    kept_bytes: int = 0

    @property
    def free_for_service_bytes(self) -> int:
        """MemAvailable plus the pool kept for this service."""
        return self.available_bytes + self.kept_bytes

    @classmethod
    def read(cls, path: Path = MEMINFO) -> HostMemory:
        """From ``path`` (/proc/meminfo); OSError if it cannot be read, ValueError if it has
        no MemTotal or MemAvailable line."""
        fields = meminfo_bytes(path.read_text())
        missing = [name for name in ("MemTotal", "MemAvailable") if name not in fields]
        if missing:
            raise ValueError(f"{path} has no {' or '.join(missing)} line")
        return cls(fields["MemTotal"], fields["MemAvailable"])

    def default_reserve_bytes(self) -> int:
        """10% of MemTotal, at most 8 GiB: what is left for everything but the budget.

        >>> round(HostMemory(24 * 2**30, 20 * 2**30).default_reserve_bytes() / 2**30, 2)
        2.4
        >>> HostMemory(755 * 2**30, 700 * 2**30).default_reserve_bytes() / 2**30
        8.0
        """
        return min(self.total_bytes // RESERVE_DIVISOR, RESERVE_MAX_BYTES)


@dataclass(frozen=True)
class MemoryPlan:
    """The memory budget in effect, and the host's figures it was fitted to (None when the
    host was not read: before start, or without /proc/meminfo).

    >>> plan = MemoryPlan.fit(64 * 2**30, HostMemory(24 * 2**30, 20 * 2**30), 2 * 2**30)
    >>> plan.budget_bytes / 2**30, plan.usable_bytes / 2**30, plan.clamped
    (18.0, 18.0, True)
    """

    configured_budget_bytes: int
    budget_bytes: int  # in effect: the configured budget, at most what the host can give
    host: HostMemory | None = None
    reserve_bytes: int | None = None

    @classmethod
    def fit(cls, budget_bytes: int, host: HostMemory, reserve_bytes: int) -> MemoryPlan:
        """The budget clamped to MemAvailable (and the pool kept for this service) less
        ``reserve_bytes`` (0 when that is less)."""
        usable = max(0, host.free_for_service_bytes - reserve_bytes)
        return cls(budget_bytes, min(budget_bytes, usable), host, reserve_bytes)

    @property
    def usable_bytes(self) -> int | None:
        """MemAvailable at start (and the pool kept for this service) less the reserve; None
        when the host was not read."""
        if self.host is None or self.reserve_bytes is None:
            return None
        return max(0, self.host.free_for_service_bytes - self.reserve_bytes)

    @property
    def clamped(self) -> bool:
        """The budget in effect is less than the one configured."""
        return self.budget_bytes < self.configured_budget_bytes

    def as_dict(self) -> dict[str, int | bool | None]:
        """The figures for ``/v1/status`` beside the budget in effect (bytes)."""
        return {
            "configured_budget_bytes": self.configured_budget_bytes,
            "budget_clamped": self.clamped,
            "host_total_bytes": None if self.host is None else self.host.total_bytes,
            "host_available_bytes": None if self.host is None else self.host.available_bytes,
            "host_kept_bytes": None if self.host is None else self.host.kept_bytes,
            "host_reserve_bytes": self.reserve_bytes,
            "host_usable_bytes": self.usable_bytes,
        }


def bytes_text(nbytes: float) -> str:
    """A size for a message: ``bytes_text(6 * 2**30)`` → '6.0 GiB', ``bytes_text(512)`` →
    '512 B'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(nbytes) < 1024:
            return f"{nbytes:.0f} B" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} TiB"
