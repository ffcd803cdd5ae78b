"""Which process made a pool's blocks, told by more than its PID.

A block's name holds the PID of the pacer that made it (``pacer-pool-<pid>-<n>``), as that pacer
sees it. A PID alone misleads: it passes to another process once the pacer has gone, and a
pacer in another PID namespace (a container sharing the host's /dev/shm) has a PID that means
another process here, or none. So each pacer writes an owner file beside its first block,
``pacer-owner.<pid>-<start>.json``, with its `ProcessIdentity`: its PID in its own namespace,
that namespace, its start time and the boot. `live_pid` finds the process it names, in any
namespace this one can see, and `owner_alive` says whether the pacer of a PID still runs
(docs/decisions/settle.md, D145).

This module imports no NumPy, because ``pacer settle`` runs it.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = [
    "OWNER_PREFIX",
    "ProcessIdentity",
    "mark_owner",
    "owner_alive",
    "owner_files",
    "unmark_owner",
]

OWNER_PREFIX = "pacer-owner."
PROC = Path("/proc")
_marked: set[tuple[str, int]] = set()  # (directory, pid) whose owner file this process wrote


def boot_id() -> str:
    """This boot's identity; "" where it cannot be read."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return ""


def start_ticks(pid: int, proc: Path = PROC) -> int | None:
    """Process ``pid``'s start time, in clock ticks after boot (/proc/PID/stat field 22);
    None once it is gone."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        text = (proc / str(pid) / "stat").read_text(errors="replace")
        return int(text[text.rindex(")") + 2 :].split()[19])
    return None


def pid_namespace(pid: int | str, proc: Path = PROC) -> str | None:
    """``pid:[4026531836]`` for process ``pid`` (or "self"); None where it cannot be read
    (another user's process, or gone)."""
    try:
        return os.readlink(proc / str(pid) / "ns" / "pid")
    except OSError:
        return None


def innermost_pid(pid: int, proc: Path = PROC) -> int | None:
    """Process ``pid``'s PID in its own namespace (the last of /proc/PID/status NSpid)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in (proc / str(pid) / "status").read_text(errors="replace").splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    return None


@dataclass(frozen=True)
class ProcessIdentity:
    """A process as it names itself: ``pid`` in its own PID namespace ``pid_ns``, its start
    time ``started`` (clock ticks after boot) and the boot it runs in."""

    pid: int
    pid_ns: str
    started: int
    boot_id: str

    @classmethod
    def of_self(cls, proc: Path = PROC) -> ProcessIdentity:
        pid = os.getpid()
        return cls(pid, pid_namespace("self", proc) or "", start_ticks(pid, proc) or 0, boot_id())

    def to_json(self) -> str:
        return json.dumps(asdict(self)) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ProcessIdentity:
        """Parse an owner file; ValueError for one that cannot be used."""
        try:
            data = json.loads(text)
            return cls(int(data["pid"]), str(data["pid_ns"]), int(data["started"]),
                       str(data["boot_id"]))  # fmt: skip
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ValueError(f"not an owner identity: {error!r}") from None

    def live_pid(self, proc: Path = PROC) -> int | None:
        """The PID here of the live process this identity names; None when no live process
        matches its boot, namespace, PID and start time. A process whose namespace cannot be
        read matches on its PID in its own namespace and its start time."""
        if self.boot_id != boot_id():
            return None
        if self.pid_ns and self.pid_ns == pid_namespace("self", proc):
            return self.pid if start_ticks(self.pid, proc) == self.started else None
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            if start_ticks(pid, proc) != self.started or innermost_pid(pid, proc) != self.pid:
                continue
            namespace = pid_namespace(pid, proc)
            if namespace is None or namespace == self.pid_ns:
                return pid
        return None


def owner_path(directory: str, identity: ProcessIdentity) -> str:
    return os.path.join(directory, f"{OWNER_PREFIX}{identity.pid}-{identity.started}.json")


def mark_owner(directory: str) -> None:
    """Write this process's owner file in ``directory`` (once); OSError if it cannot."""
    key = (os.path.normpath(directory), os.getpid())
    if key in _marked:
        return
    identity = ProcessIdentity.of_self()
    path = owner_path(directory, identity)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(descriptor, identity.to_json().encode())
    finally:
        os.close(descriptor)
    _marked.add(key)


def unmark_owner(directory: str) -> None:
    """Remove this process's owner file from ``directory``: it holds no block there now."""
    key = (os.path.normpath(directory), os.getpid())
    if key in _marked:
        _marked.discard(key)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(owner_path(directory, ProcessIdentity.of_self()))


def owner_files(directory: str) -> dict[int, list[tuple[str, ProcessIdentity | None]]]:
    """The owner files in ``directory`` by the PID they name: (path, identity or None where
    the file cannot be read)."""
    found: dict[int, list[tuple[str, ProcessIdentity | None]]] = {}
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return found
    for name in names:
        if not (name.startswith(OWNER_PREFIX) and name.endswith(".json")):
            continue
        pid_text = name.removeprefix(OWNER_PREFIX).partition("-")[0]
        if not pid_text.isdigit():
            continue
        path = os.path.join(directory, name)
        try:
            identity: ProcessIdentity | None = ProcessIdentity.from_json(Path(path).read_text())
        except (OSError, ValueError):
            identity = None
        found.setdefault(int(pid_text), []).append((path, identity))
    return found


def owner_alive(
    pid: int,
    owners: dict[int, list[tuple[str, ProcessIdentity | None]]],
    proc: Path = PROC,
) -> bool | None:
    """Whether the pacer whose blocks name ``pid`` still runs, by its owner files in
    ``owners`` (`owner_files`): True if one names a live process, False if all name none;
    None with no owner file for ``pid`` (a pacer from before they were written)."""
    files = owners.get(pid)
    if not files:
        return None
    return any(identity is None or identity.live_pid(proc) is not None for _, identity in files)
