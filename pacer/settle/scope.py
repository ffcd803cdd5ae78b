"""What ``pacer settle`` judges: the host's used memory, or the memory of the cgroup whose
``memory.max`` limits this process, as the service fits its budget to the tighter of the two
(`pacer.host.memory.HostMemory`); ``--scope`` chooses, ``auto`` the cgroup where one limits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pacer.host.cgroup import own_cgroup, read_cgroup_limit
from pacer.host.memory import HostFiles, HostMemory
from pacer.settle.detector import gib

Kind = Literal["host", "cgroup"]
SCOPES = ("auto", "host", "cgroup")
SCOPE_RULE = (
    "auto (the cgroup whose memory.max limits this process, where one does, else the host), "
    "host (the host's MemTotal - MemAvailable) or cgroup (that cgroup's memory.current)"
)


@dataclass(frozen=True)
class Scope:
    """The memory judged: the host's, or cgroup ``cgroup``'s (its path as /proc/self/cgroup
    names it) against its ``max_bytes`` (memory.max, when the scope was chosen).

    >>> Scope("cgroup", "/system.slice/pacer.service", 64 * 2**30).what
    "cgroup /system.slice/pacer.service's memory.current"
    """

    kind: Kind
    cgroup: str | None = None
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        if (self.kind == "cgroup") != (self.cgroup is not None and self.max_bytes is not None):
            raise ValueError(f"a cgroup and its memory.max go with the cgroup scope only: {self}")

    @property
    def what(self) -> str:
        """The memory judged, as a message names it."""
        if self.cgroup is None:
            return "the host's used memory"
        return f"cgroup {self.cgroup}'s memory.current"

    def used(self, used_bytes: int) -> str:
        """``"used 3.0 GiB of cgroup /pacer's 64.0 GiB memory.max (its memory.current)"``."""
        if self.cgroup is None or self.max_bytes is None:
            return f"used {gib(used_bytes)} of the host (MemTotal - MemAvailable)"
        return (
            f"used {gib(used_bytes)} of cgroup {self.cgroup}'s {gib(self.max_bytes)} memory.max "
            "(its memory.current)"
        )

    def judging(self) -> str:
        """The line that says, at the start of a run, what is judged and why."""
        if self.cgroup is None:
            return "judging the host's used memory (MemTotal - MemAvailable of /proc/meminfo)"
        return (
            f"judging {self.what} against its memory.max, {gib(self.max_bytes or 0)}: the limit "
            "that binds this process (--scope host judges the host)"
        )

    @property
    def key(self) -> dict[str, str | None]:
        """What a remembered baseline is of: two scopes with the same key share a baseline."""
        return {"scope": self.kind, "cgroup_path": self.cgroup}

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"scope": self.kind}
        if self.cgroup is not None:
            out |= {"cgroup_path": self.cgroup, "cgroup_max_bytes": self.max_bytes}
        return out


HOST = Scope("host")


def parse_scope(text: str) -> str:
    """``text`` if it is one of `SCOPES`; ValueError naming the option and the rule."""
    if text not in SCOPES:
        raise ValueError(f"--scope: {text!r} is not a scope: give {SCOPE_RULE}")
    return text


def resolve_scope(choice: str, files: HostFiles) -> Scope:
    """The scope ``choice`` (one of `SCOPES`) comes to on this host: the cgroup
    `pacer.host.cgroup.read_cgroup_limit` finds (the one whose memory.max leaves the least
    room, of this process's cgroup and its ancestors) for ``cgroup`` and, where there is one,
    ``auto``; the host otherwise. ValueError, naming the option and the rule, for ``cgroup``
    where no limit is set."""
    if parse_scope(choice) == "host":
        return HOST
    limit = read_cgroup_limit(files.self_cgroup, files.cgroup_root)
    if limit is not None:
        return Scope("cgroup", limit.path, limit.max_bytes)
    if choice == "auto":
        return HOST
    try:
        own = own_cgroup(files.self_cgroup)
    except OSError as exc:
        own, why = None, f"{files.self_cgroup} cannot be read ({exc})"
    else:
        why = f"{files.self_cgroup} names no cgroup v2 (0::)"
    if own is not None:
        why = (
            f'its cgroup {own} and every ancestor have memory.max "max" (or none readable) '
            f"under {files.cgroup_root}"
        )
    raise ValueError(
        '--scope cgroup: needs a cgroup v2 memory limit (a memory.max other than "max") on '
        f"this process's cgroup or an ancestor, and there is none: {why}; "
        "--scope host or auto judges the host"
    )


def other_bound(scope: Scope, files: HostFiles) -> str | None:
    """Where the memory not judged would bound the next pacer more than the memory judged (the
    service takes the lesser of MemAvailable and the cgroup's room, D115), a line that says
    so; None otherwise, or where the host cannot be read."""
    try:
        host = HostMemory.read(files)
    except (OSError, ValueError):
        return None
    if host.cgroup is None:
        return None
    available, room = gib(host.available_bytes), gib(host.cgroup.room_bytes)
    if scope.kind == "cgroup" and not host.cgroup_binds:
        return (
            f"the host's MemAvailable ({available}) is no more than the room cgroup "
            f"{host.cgroup.path}'s memory.max leaves ({room}): the next pacer is bounded by the "
            "host, which was not judged (--scope host judges it)"
        )
    if scope.kind == "host" and host.cgroup_binds:
        return (
            f"cgroup {host.cgroup.path}'s memory.max leaves {room}, less than the host's "
            f"MemAvailable ({available}): the next pacer is bounded by the cgroup, which was not "
            "judged (--scope cgroup or auto judges it)"
        )
    return None
