"""Memory that a dead pacer's pool blocks still hold, mapped by processes that outlived it.

Unlinking a shared-memory block removes its name, not its memory: the pages go back once no
process maps the block. A synthesis process that outlived its service keeps every pool block
mapped (the whole pool, tens of GiB) while used memory stays flat, which "stable" alone would
call settled. `HeldBlockScanner` finds such mappings in /proc/PID/maps (an unlinked block in
/dev/shm shows as ``/dev/shm/pacer-pool-<pid>-<n> (deleted)``) and sizes them from
/proc/PID/smaps; `ReportedHolders` says what it found and, asked to, kills pacer's synthesis
processes among the holders.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpu.procs.lifeline import SYNTHESIS_PROCESS_NAME
from gpu.shm import block_maps, identity
from gpu.shm.block_maps import BlockMapping
from gpu.shm.blocks import BLOCK_PREFIX, SHM_DIR
from pacer.settle.detector import GIB, gib
from pacer.settle.sources import self_and_ancestors


@dataclass(frozen=True)
class BlockHolder:
    """A process that maps pool blocks whose pacer is gone.

    ``started`` is the process's start time in clock ticks after boot (/proc/PID/stat), which
    tells it from a later process given the same PID. ``synthesis``: its name or command line
    says it is one of pacer's synthesis processes (`is_synthesis_process`).
    """

    pid: int
    name: str
    cmdline: str
    started: int
    owners: tuple[int, ...]  # the dead services whose blocks it maps
    blocks: int
    unlinked: int  # of those, blocks whose name is gone from their directory
    resident_bytes: int  # what its mappings of them have resident (Rss)
    synthesis: bool

    def __str__(self) -> str:
        what = "pacer synthesis process" if self.synthesis else "process"
        owners = ", ".join(str(pid) for pid in self.owners)
        command = one_line(self.cmdline, 100)
        blocks = f"{self.blocks} pool block{'' if self.blocks == 1 else 's'}"
        return (
            f"{what} {self.pid} ({command or self.name}) maps {blocks} of dead pacer {owners} "
            f"({self.unlinked} unlinked), {size(self.resident_bytes)} resident"
        )

    def as_json(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "name": self.name,
            "cmdline": self.cmdline,
            "owners": list(self.owners),
            "blocks": self.blocks,
            "unlinked": self.unlinked,
            "resident_bytes": self.resident_bytes,
            "synthesis": self.synthesis,
        }


@dataclass(frozen=True)
class Held:
    """What one scan found: the holders, and the bytes their blocks hold, each block once."""

    holders: tuple[BlockHolder, ...] = ()
    held_bytes: int = 0

    def words(self) -> str:
        """``"held by orphans: 3 processes, 63.0 GiB"``."""
        count = len(self.holders)
        processes = "process" if count == 1 else "processes"
        return f"held by orphans: {count} {processes}, {size(self.held_bytes)}"

    def as_json(self) -> dict[str, object]:
        return {
            "held_bytes": self.held_bytes,
            "processes": [holder.as_json() for holder in self.holders],
        }


HeldCheck = Callable[[], Held]


def size(n_bytes: int) -> str:
    """GiB from 1 GiB up, MiB below: ``"63.0 GiB"``, ``"0.5 MiB"``."""
    return gib(n_bytes) if n_bytes >= GIB else f"{n_bytes / 2**20:.1f} MiB"


def one_line(text: str, limit: int) -> str:
    """``text`` on one line (each run of control characters and white space one space), cut to
    ``limit`` characters with an ellipsis.

    >>> one_line("python -c 'import x\\nx.run()'", 100), one_line("a" * 12, 8)
    ("python -c 'import x x.run()'", 'aaaaaaa…')
    """
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def is_synthesis_process(name: str) -> bool:
    """Whether a process that maps pacer's pool blocks is one of pacer's synthesis processes:
    the name pacer gives them (`gpu.procs.lifeline.SYNTHESIS_PROCESS_NAME`). A forkserver's
    child of another program that maps a block is not one (D146)."""
    return name == SYNTHESIS_PROCESS_NAME


class HeldBlockScanner:
    """Processes mapping pool blocks (in ``directory``, names starting with ``prefix``) whose
    owner, the process in the block's name, no longer maps them: it died, or its PID went to
    another process. A block whose pacer's owner file names a live process (in any PID
    namespace: `gpu.shm.identity`) is that pacer's, whatever its PID means here.

    A block whose owner's maps cannot be read (another user's service) counts as its owner's.
    This process and its ancestors are left out. ``proc`` is /proc, or a tree laid out like it.
    """

    def __init__(
        self, proc: Path = Path("/proc"), prefix: str = BLOCK_PREFIX, directory: str = SHM_DIR
    ) -> None:
        if not prefix.startswith(BLOCK_PREFIX):
            raise ValueError(f"prefix must start with {BLOCK_PREFIX!r}, got {prefix!r}")
        self.proc = proc
        self.prefix = prefix
        self.directory = directory

    def __call__(self) -> Held:
        skip = self_and_ancestors(self.proc)
        mapped, unreadable = block_maps.scan(self.proc, self.prefix, self.directory)
        owned = {m.inode for pid, found in mapped.items() for m in found if m.owner == pid}
        owners = identity.owner_files(self.directory)
        runs: dict[int, bool] = {}  # a block's PID → whether its pacer, by its identity, runs

        def pacer_runs(owner: int) -> bool:
            if owner not in runs:
                runs[owner] = identity.owner_alive(owner, owners, self.proc) is True
            return runs[owner]

        holders = []
        block_bytes: dict[tuple[str, int], int] = {}
        for pid, found in sorted(mapped.items()):
            orphaned = [
                m for m in found
                if m.inode not in owned and m.owner not in unreadable and not pacer_runs(m.owner)
            ]  # fmt: skip
            if pid in skip or not orphaned:
                continue
            holder = self._holder(pid, orphaned, block_bytes)
            if holder is not None:
                holders.append(holder)
        return Held(tuple(holders), sum(block_bytes.values()))

    def _holder(
        self, pid: int, orphaned: list[BlockMapping], block_bytes: dict[tuple[str, int], int]
    ) -> BlockHolder | None:
        """The holder, its mappings sized; None once it is gone. A block's bytes are the most
        any of its holders has resident (each page a holder touched is the block's)."""
        where = self.proc / str(pid)
        try:
            resident = _resident_bytes(
                (where / "smaps").read_text(errors="replace"), {m.start for m in orphaned}
            )
            stat = (where / "stat").read_text(errors="replace")
            cmdline = (where / "cmdline").read_bytes()
        except OSError:
            return None
        name = stat[stat.index("(") + 1 : stat.rindex(")")] if ")" in stat else ""
        fields = stat[stat.rindex(")") + 2 :].split() if ")" in stat else []
        started = int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else 0
        command = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
        total = 0
        for mapping in orphaned:
            size = resident.get(mapping.start, 0)
            total += size
            block_bytes[mapping.inode] = max(block_bytes.get(mapping.inode, 0), size)
        return BlockHolder(
            pid=pid,
            name=name,
            cmdline=command,
            started=started,
            owners=tuple(sorted({m.owner for m in orphaned})),
            blocks=len({m.inode for m in orphaned}),
            unlinked=len({m.inode for m in orphaned if m.unlinked}),
            resident_bytes=total,
            synthesis=is_synthesis_process(name),
        )


def _resident_bytes(smaps: str, starts: set[str]) -> dict[str, int]:
    """Rss of each mapping of /proc/PID/smaps text whose start address is in ``starts``."""
    resident: dict[str, int] = {}
    current: str | None = None
    for line in smaps.splitlines():
        head, _, rest = line.partition(" ")
        if "-" in head and not head.endswith(":"):  # a mapping's first line
            start = head.partition("-")[0]
            current = start if start in starts else None
        elif current is not None and head == "Rss:":
            value = rest.split()
            resident[current] = int(value[0]) * 1024 if value and value[0].isdigit() else 0
    return resident


def kill_holder(holder: BlockHolder, proc: Path = Path("/proc")) -> bool:
    """SIGKILL ``holder`` if it is still the process that was found (same PID, same start
    time); whether the signal went. Through a pidfd where the system has them, so the PID
    cannot pass to another process between the check and the signal."""
    try:
        descriptor = os.pidfd_open(holder.pid)
    except ProcessLookupError:
        return False
    except (AttributeError, OSError):  # no pidfd here: check, then signal by PID
        descriptor = None
    try:
        if _started(proc / str(holder.pid) / "stat") != holder.started:
            return False
        if descriptor is None:
            os.kill(holder.pid, signal.SIGKILL)
        else:
            signal.pidfd_send_signal(descriptor, signal.SIGKILL)
    except ProcessLookupError:
        return False
    finally:
        if descriptor is not None:
            os.close(descriptor)
    return True


def _started(stat_path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        text = stat_path.read_text(errors="replace")
        return int(text[text.rindex(")") + 2 :].split()[19])
    return None


class ReportedHolders:
    """``scan``, telling ``report`` of each holder once and, with ``kill_orphans``, killing
    those that are pacer's synthesis processes (``kill``: `kill_holder`); a holder that is not
    one is named, never killed."""

    def __init__(
        self,
        scan: HeldCheck,
        report: Callable[[str], None],
        kill_orphans: bool = False,
        kill: Callable[[BlockHolder], bool] = kill_holder,
    ) -> None:
        self.scan = scan
        self.report = report
        self.kill_orphans = kill_orphans
        self.kill = kill
        self._told: set[tuple[int, int]] = set()

    def __call__(self) -> Held:
        held = self.scan()
        for holder in held.holders:
            key = (holder.pid, holder.started)
            if key in self._told:
                continue
            self._told.add(key)
            if not self.kill_orphans:
                self.report(f"{holder}: memory that is not given back while it lives")
            elif not holder.synthesis:
                self.report(f"{holder}: not a pacer synthesis process, so not killed")
            elif self.kill(holder):
                self.report(f"killed {holder}")
            else:
                self._told.discard(key)  # gone meanwhile, or another process now: look again
        return held
