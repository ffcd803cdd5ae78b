"""The host's memory against what the service means to hold, read once at start.

The service may use MemAvailable, or the cgroup's room where that is less (`pacer.host.cgroup`),
less a reserve (``PACER_MEMORY__HOST_RESERVE_BYTES``). At start the pinned pool must fit, or the
service refuses to start. The memory budget is clamped to fit, with a warning
(docs/decisions/service.md, D37); unset, it is all of that (D161). This module reads and
plans; it raises nothing about settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pacer.host.cgroup import CGROUP_ROOT, SELF_CGROUP, CgroupLimit, read_cgroup_limit

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
class HostFiles:
    """Where the host's memory is read: /proc/meminfo, and this process's cgroup
    (/proc/self/cgroup, under the cgroup filesystem ``cgroup_root``)."""

    meminfo: Path = MEMINFO
    self_cgroup: Path = SELF_CGROUP
    cgroup_root: Path = CGROUP_ROOT


HOST_FILES = HostFiles()


@dataclass(frozen=True)
class HostMemory:
    """The host's memory at one instant, in bytes.

    ``kept_bytes`` is a pinned pool the previous pacer kept for this one. It is not in MemAvailable,
    yet is this service's to use. ``cgroup`` is this process's cgroup limit, where one is set.
    """

    total_bytes: int  # MemTotal
    available_bytes: int  # MemAvailable
    kept_bytes: int = 0
    cgroup: CgroupLimit | None = None

    @property
    def room_bytes(self) -> int:
        """MemAvailable, or the cgroup's room (memory.max less memory.current) where that is
        less."""
        if self.cgroup is None:
            return self.available_bytes
        return min(self.available_bytes, self.cgroup.room_bytes)

    @property
    def cgroup_binds(self) -> bool:
        """The cgroup's room is less than MemAvailable: its memory.max is the bound."""
        return self.room_bytes < self.available_bytes

    @property
    def free_for_service_bytes(self) -> int:
        """`room_bytes` plus the pool kept for this service (charged to another cgroup).

        >>> limit = CgroupLimit("/pacer.service", 16 * 2**30, 2**30)
        >>> HostMemory(755 * 2**30, 700 * 2**30, 4 * 2**30, limit).free_for_service_bytes / 2**30
        19.0
        """
        return self.room_bytes + self.kept_bytes

    @classmethod
    def read(cls, files: HostFiles = HOST_FILES) -> HostMemory:
        """From ``files.meminfo`` (/proc/meminfo) and this process's cgroup; OSError if
        /proc/meminfo cannot be read, ValueError if it has no MemTotal or MemAvailable line."""
        fields = meminfo_bytes(files.meminfo.read_text())
        missing = [name for name in ("MemTotal", "MemAvailable") if name not in fields]
        if missing:
            raise ValueError(f"{files.meminfo} has no {' or '.join(missing)} line")
        cgroup = read_cgroup_limit(files.self_cgroup, files.cgroup_root)
        return cls(fields["MemTotal"], fields["MemAvailable"], cgroup=cgroup)

    def default_reserve_bytes(self) -> int:
        """10% of MemTotal, or of the cgroup's memory.max where that is less, at most 8 GiB:
        what is left for everything but the budget.

        >>> round(HostMemory(24 * 2**30, 20 * 2**30).default_reserve_bytes() / 2**30, 2)
        2.4
        >>> HostMemory(755 * 2**30, 700 * 2**30).default_reserve_bytes() / 2**30
        8.0
        """
        seen = self.total_bytes
        if self.cgroup is not None:
            seen = min(seen, self.cgroup.max_bytes)
        return min(seen // RESERVE_DIVISOR, RESERVE_MAX_BYTES)


@dataclass(frozen=True)
class MemoryPlan:
    """The memory budget in effect, and the host's figures it was fitted to (None if unread).

    >>> plan = MemoryPlan.fit(64 * 2**30, HostMemory(24 * 2**30, 20 * 2**30), 2 * 2**30)
    >>> plan.budget_bytes / 2**30, plan.usable_bytes / 2**30, plan.clamped
    (18.0, 18.0, True)
    """

    configured_budget_bytes: int  # what was asked; where automatic, what the host gives
    budget_bytes: int  # in effect: the configured budget, at most what the host can give
    host: HostMemory | None = None
    reserve_bytes: int | None = None
    automatic: bool = False  # the budget is what the host gives (PACER_MEMORY__BUDGET_BYTES=0)

    @classmethod
    def fit(cls, budget_bytes: int, host: HostMemory, reserve_bytes: int) -> MemoryPlan:
        """The budget clamped to MemAvailable, or the cgroup's room where that is less, (and
        the pool kept for this service) less ``reserve_bytes`` (0 when that is less); a budget
        of 0 is automatic: all of that.

        >>> plan = MemoryPlan.fit(0, HostMemory(24 * 2**30, 20 * 2**30), 2 * 2**30)
        >>> plan.budget_bytes / 2**30, plan.automatic, plan.clamped
        (18.0, True, False)
        """
        usable = max(0, host.free_for_service_bytes - reserve_bytes)
        if not budget_bytes:
            return cls(usable, usable, host, reserve_bytes, automatic=True)
        return cls(budget_bytes, min(budget_bytes, usable), host, reserve_bytes)

    @property
    def usable_bytes(self) -> int | None:
        """MemAvailable at start, or the cgroup's room where that is less, (and the pool kept
        for this service) less the reserve; None when the host was not read."""
        if self.host is None or self.reserve_bytes is None:
            return None
        return max(0, self.host.free_for_service_bytes - self.reserve_bytes)

    @property
    def bound(self) -> str | None:
        """What bounds `usable_bytes`: ``MemAvailable``, or ``memory.max of <cgroup>`` where
        that cgroup's room is less; None when the host was not read."""
        if self.host is None:
            return None
        if self.host.cgroup is not None and self.host.cgroup_binds:
            return f"memory.max of {self.host.cgroup.path}"
        return "MemAvailable"

    @property
    def clamped(self) -> bool:
        """The budget in effect is less than the one configured."""
        return self.budget_bytes < self.configured_budget_bytes

    def as_dict(self) -> dict[str, int | bool | str | None]:
        """The figures for ``/v1/status`` beside the budget in effect (bytes); the cgroup's
        None where it sets no limit."""
        cgroup = None if self.host is None else self.host.cgroup
        return {
            "configured_budget_bytes": self.configured_budget_bytes,
            "budget_automatic": self.automatic,
            "budget_clamped": self.clamped,
            "host_total_bytes": None if self.host is None else self.host.total_bytes,
            "host_available_bytes": None if self.host is None else self.host.available_bytes,
            "host_kept_bytes": None if self.host is None else self.host.kept_bytes,
            "host_reserve_bytes": self.reserve_bytes,
            "host_usable_bytes": self.usable_bytes,
            "host_usable_bound": self.bound,
            "cgroup_path": None if cgroup is None else cgroup.path,
            "cgroup_max_bytes": None if cgroup is None else cgroup.max_bytes,
            "cgroup_current_bytes": None if cgroup is None else cgroup.current_bytes,
        }


def bytes_text(nbytes: float) -> str:
    """A size for a message: ``bytes_text(6 * 2**30)`` → '6.0 GiB', ``bytes_text(512)`` →
    '512 B'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(nbytes) < 1024:
            return f"{nbytes:.0f} B" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} TiB"
