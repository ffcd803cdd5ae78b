"""This process's cgroup (v2) memory limit, which /proc/meminfo does not show.

/proc/self/cgroup names the process's cgroup. It and each ancestor may hold ``memory.max``
("max": no limit) and ``memory.current``. The room left is the least memory.max less
memory.current over the cgroups with a limit. memory.current counts page cache, so the room
errs on the safe side. Under cgroup v1, or without a cgroup filesystem, there is no limit.
``pacer settle`` samples the cgroup found here (`read_cgroup`, `read_memory_stat`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

SELF_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")

log = logging.getLogger("pacer.service")


@dataclass(frozen=True)
class CgroupLimit:
    """A cgroup's memory limit and usage in bytes; ``path`` as /proc/self/cgroup names it.

    >>> CgroupLimit("/pacer.service", 64 * 2**30, 70 * 2**30).room_bytes
    0
    """

    path: str
    max_bytes: int  # memory.max
    current_bytes: int  # memory.current

    @property
    def room_bytes(self) -> int:
        """What the cgroup may still charge before its OOM killer: memory.max less
        memory.current."""
        return max(0, self.max_bytes - self.current_bytes)


def own_cgroup(self_cgroup: Path = SELF_CGROUP) -> str | None:
    """This process's cgroup v2 path, as ``self_cgroup`` (/proc/self/cgroup) names it on its
    ``0::`` line; None where it names none (cgroup v1 only). OSError if it cannot be read."""
    lines = self_cgroup.read_text().splitlines()
    return next((line[3:] for line in lines if line.startswith("0::")), None)


def read_cgroup_limit(
    self_cgroup: Path = SELF_CGROUP, root: Path = CGROUP_ROOT
) -> CgroupLimit | None:
    """The limit, of this process's cgroup and its ancestors, that leaves the least room;
    None, said at debug level, where none is set or none can be read (cgroup v1, no cgroup
    filesystem)."""
    try:
        own = own_cgroup(self_cgroup)
    except OSError as exc:
        log.debug("no cgroup memory limit: %s", exc)
        return None
    if own is None:
        log.debug("no cgroup memory limit: %s names no cgroup v2 (0::)", self_cgroup)
        return None
    path = PurePosixPath(own)
    limits = [
        limit
        for cgroup in (path, *path.parents)
        if (limit := read_cgroup(str(cgroup), root)) is not None
    ]
    tightest = min(limits, key=lambda limit: limit.room_bytes, default=None)
    if tightest is None:
        log.debug("no cgroup memory limit: none under %s for %s or its ancestors", root, own)
    return tightest


def read_cgroup(cgroup: str, root: Path = CGROUP_ROOT) -> CgroupLimit | None:
    """``cgroup``'s memory.max and memory.current now; None for "max" or where either cannot
    be read."""
    folder = root / cgroup.lstrip("/")
    try:
        limit = (folder / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return CgroupLimit(cgroup, int(limit), int((folder / "memory.current").read_text()))
    except (OSError, ValueError):
        return None


def read_memory_stat(cgroup: str, root: Path = CGROUP_ROOT) -> dict[str, int]:
    """``cgroup``'s memory.stat (bytes, or counts of events; its descendants' included, as
    cgroup v2 sums them), e.g. ``shmem``: the shared memory (tmpfs, memfds) charged to it;
    empty where it cannot be read."""
    try:
        text = (root / cgroup.lstrip("/") / "memory.stat").read_text()
    except OSError:
        return {}
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if value.strip().isdigit():
            fields[name] = int(value)
    return fields
