"""The owner record of a kept pool, its lock, and the sweep that tells kept blocks from stale ones.

A pool that may outlive its pacer has a record beside its blocks, named
``pacer-pool.<pid>-<n>.json``. It holds the slots' layout, the blocks and where they are, who
made the pool and who holds it, its ``generation`` and its boot. The holder keeps an exclusive
``flock`` on the record; the kernel drops it when the holder ends (docs/decisions/restarts.md,
D110).

`survey` reads every record. A locked record belongs to a live pacer. An unlocked one whose
blocks are all there is kept: ``state`` "kept" after a clean stop, "in-use" after a crash. Any
other is stale. `sweep` removes stale records and their blocks, and blocks of dead processes
that no record keeps.

This module imports no NumPy, because ``pacer settle`` runs it.

>>> layout = PoolLayout(768, (0, 256, 512), ((32,),) * 3, "<u8", "goldilocks")
>>> layout.fits(PoolLayout(768, (0, 256, 512), ((32,),) * 3, "<u8", None))
True
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import itertools
import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpu.shm.blocks import SHM_DIR, remove_file, remove_stale_blocks
from gpu.sizes import format_bytes

__all__ = [
    "RECORD_PREFIX",
    "KeptPool",
    "PoolLayout",
    "PoolRecord",
    "RecordFile",
    "Sweep",
    "adoptable_bytes",
    "boot_id",
    "survey",
    "sweep",
]

logger = logging.getLogger("gpu.shm.record")

RECORD_PREFIX = "pacer-pool."
"""Owner records: ``pacer-pool.<pid>-<n>.json`` beside the blocks (not a block name)."""
RECORD_FORMAT = 1
Store = Literal["shm", "fdstore"]
State = Literal["in-use", "kept"]
_record_numbers = itertools.count()


@dataclass(frozen=True)
class PoolLayout:
    """How a pool's slots are laid out: what a successor must match to adopt the blocks.

    Sizes, offsets, shapes and dtype must agree. ``field`` is only for people reading the record.
    """

    slot_bytes: int
    offsets: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtype: str  # NumPy's dtype.str, e.g. "<u8"
    field: str | None = None

    def fits(self, other: PoolLayout) -> bool:
        """Whether slots laid out as ``other`` can serve as slots laid out as this."""
        mine = (self.slot_bytes, self.offsets, self.shapes, self.dtype)
        return mine == (other.slot_bytes, other.offsets, other.shapes, other.dtype)

    def words(self) -> str:
        shapes = "+".join("×".join(map(str, shape)) for shape in self.shapes)
        return f"{format_bytes(self.slot_bytes)} slots of {shapes} {self.dtype}"


@dataclass(frozen=True)
class PoolRecord:
    """What the record file holds (see the module docstring)."""

    layout: PoolLayout
    blocks: tuple[str, ...]
    store: Store
    state: State
    creator_pid: int
    holder_pid: int
    generation: int
    boot_id: str
    updated_at: float  # Unix time

    @property
    def total_bytes(self) -> int:
        return self.layout.slot_bytes * len(self.blocks)

    def to_json(self) -> str:
        out: dict[str, Any] = {"format": RECORD_FORMAT, **dataclasses.asdict(self)}
        out |= out.pop("layout")
        return json.dumps(out, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> PoolRecord:
        """Parse a record; raise ValueError saying what is wrong with one that cannot be used."""
        try:
            data = json.loads(text)
            if data.get("format") != RECORD_FORMAT:
                raise ValueError(f"format {data.get('format')!r}, not {RECORD_FORMAT}")
            layout = PoolLayout(
                int(data["slot_bytes"]),
                tuple(int(x) for x in data["offsets"]),
                tuple(tuple(int(d) for d in shape) for shape in data["shapes"]),
                str(data["dtype"]),
                data.get("field"),
            )
            record = cls(
                layout, tuple(str(b) for b in data["blocks"]), data["store"], data["state"],
                int(data["creator_pid"]), int(data["holder_pid"]), int(data["generation"]),
                str(data["boot_id"]), float(data["updated_at"]),
            )  # fmt: skip
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as error:
            raise ValueError(f"not a pool record: {error!r}") from None
        if record.store not in ("shm", "fdstore") or record.state not in ("in-use", "kept"):
            raise ValueError(f"store {record.store!r} or state {record.state!r} unknown")
        return record


class RecordFile:
    """An open record file and its lock: `try_lock` takes it without waiting, `close` drops it.

    The file is opened close-on-exec, so no child holds the lock.
    """

    def __init__(self, path: str, create: bool = False) -> None:
        self.path = path
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT | os.O_EXCL if create else 0)
        self._fd: int | None = os.open(path, flags, 0o600)
        self.locked = False

    @classmethod
    def new(cls, directory: str = SHM_DIR) -> RecordFile:
        """Make a locked record file in ``directory`` for this process; may raise OSError."""
        while True:
            name = f"{RECORD_PREFIX}{os.getpid()}-{next(_record_numbers)}.json"
            try:
                record = cls(os.path.join(directory, name), create=True)
            except FileExistsError:  # a predecessor's of the same PID (a container's PID 1)
                continue
            break
        if not record.try_lock():
            raise RuntimeError(f"{record.path} is locked by another process")
        return record

    def try_lock(self) -> bool:
        try:
            fcntl.flock(self._descriptor(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.locked = True
        return True

    def read(self) -> PoolRecord:
        """The record; ValueError when it cannot be used."""
        with open(self.path, encoding="utf-8", errors="replace") as file:
            return PoolRecord.from_json(file.read())

    def write(self, record: PoolRecord) -> None:
        """Replace the record in place, keeping the file and its lock."""
        data = record.to_json().encode()
        descriptor = self._descriptor()
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, data, 0)

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # the lock goes with the last descriptor of the open file
            self._fd = None
            self.locked = False

    def _descriptor(self) -> int:
        if self._fd is None:
            raise ValueError(f"record {self.path} is closed")
        return self._fd


@dataclass(frozen=True)
class KeptPool:
    """A pool kept for the next pacer, as `survey` found it."""

    path: str
    record: PoolRecord

    def words(self) -> str:
        """``"kept for the next pacer: 21 blocks, 63.0 GiB in /dev/shm (pacer 812 stopped)"``."""
        record = self.record
        where = "the service manager's descriptor store" if record.store == "fdstore" else (
            os.path.dirname(self.path)
        )  # fmt: skip
        how = "stopped" if record.state == "kept" else "died"
        return (
            f"kept for the next pacer: {len(record.blocks)} blocks, "
            f"{format_bytes(record.total_bytes)} in {where} (pacer {record.holder_pid} {how}, "
            f"generation {record.generation}, {record.layout.words()})"
        )


@dataclass(frozen=True)
class Sweep:
    """What `sweep` found and did."""

    kept: tuple[KeptPool, ...] = ()
    removed_blocks: int = 0
    removed_bytes: int = 0
    stale_records: tuple[tuple[str, str], ...] = ()  # (path, why)

    @property
    def kept_bytes(self) -> int:
        return sum(pool.record.total_bytes for pool in self.kept)


def boot_id() -> str:
    """This boot's identity (blocks in tmpfs do not outlive it); "" where it cannot be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as file:
            return file.read().strip()
    except OSError:
        return ""


def record_paths(directory: str = SHM_DIR) -> list[str]:
    """The paths of the owner records in ``directory``, by name; none where it is missing."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    return [
        os.path.join(directory, name)
        for name in names
        if name.startswith(RECORD_PREFIX) and name.endswith(".json")
    ]


def survey(
    directory: str = SHM_DIR, shmem_bytes: int | None = None
) -> Iterator[tuple[RecordFile, PoolRecord | None, str | None]]:
    """Yield each record in ``directory`` not held by a live pacer, locked for the caller.

    Each item is (file, record or None, why it is stale or None); the caller closes or removes the
    file. Blocks in the descriptor store cannot be seen from here, so ``shmem_bytes`` (Shmem in
    /proc/meminfo) judges them: the host's shared memory must at least hold them.
    """
    for path in record_paths(directory):
        try:
            file = RecordFile(path)
        except OSError:
            continue  # gone meanwhile, or another user's
        if not file.try_lock():
            file.close()
            continue  # a live pacer's pool
        try:
            record: PoolRecord | None = file.read()
        except (OSError, ValueError) as error:
            yield file, None, f"unreadable ({error})"
            continue
        assert record is not None
        yield file, record, stale_because(record, directory, shmem_bytes)


def stale_because(record: PoolRecord, directory: str, shmem_bytes: int | None) -> str | None:
    """Why a record nobody holds cannot be adopted; None when its blocks are all there."""
    if record.boot_id != boot_id():
        return "it is from an earlier boot"
    if record.store == "fdstore":
        if shmem_bytes is not None and shmem_bytes < record.total_bytes:
            return "the host's shared memory cannot hold its blocks: they are gone"
        return None
    for name in record.blocks:
        try:
            size = os.stat(os.path.join(directory, name)).st_size
        except OSError:
            return f"its block {name} is gone"
        if size != record.layout.slot_bytes:
            return f"its block {name} holds {size} bytes, not {record.layout.slot_bytes}"
    return None


def sweep(
    directory: str = SHM_DIR, shmem_bytes: int | None = None, drop_kept: bool = False
) -> Sweep:
    """Remove stale records in ``directory`` with their blocks, then dead processes' loose blocks.

    With ``drop_kept``, kept pools go too. Otherwise they stay and are listed.
    """
    kept: list[KeptPool] = []
    stale: list[tuple[str, str]] = []
    removed = freed = 0
    for file, record, why in survey(directory, shmem_bytes):
        if why is None and drop_kept:
            why = "asked to drop kept pools"
        if why is None and record is not None:
            kept.append(KeptPool(file.path, record))
            file.close()
            continue
        stale.append((file.path, why or "unreadable"))
        logger.warning("removing the pool record %s: %s", file.path, why)
        if record is not None and record.store == "shm":
            for name in record.blocks:
                size = remove_file(os.path.join(directory, name))
                if size is not None:
                    removed, freed = removed + 1, freed + size
        file.remove()
    keep = {name for pool in kept for name in pool.record.blocks}
    orphans, orphan_bytes = remove_stale_blocks(directory, keep)
    return Sweep(tuple(kept), removed + orphans, freed + orphan_bytes, tuple(stale))


def adoptable_bytes(layout: PoolLayout, directory: str = SHM_DIR) -> int:
    """Bytes of the first kept pool in ``directory`` that ``layout`` can adopt; 0 if none."""
    found = 0
    for file, record, why in survey(directory):
        file.close()
        if not found and why is None and record is not None and layout.fits(record.layout):
            found = record.total_bytes
    return found


def new_record(
    layout: PoolLayout,
    blocks: Sequence[str],
    store: Store,
    previous: PoolRecord | None = None,
    state: State = "in-use",
) -> PoolRecord:
    """The record of a pool this process holds: new, or ``previous`` one generation on."""
    return PoolRecord(
        layout=layout,
        blocks=tuple(blocks),
        store=store,
        state=state,
        creator_pid=os.getpid() if previous is None else previous.creator_pid,
        holder_pid=os.getpid(),
        generation=1 if previous is None else previous.generation + 1,
        boot_id=boot_id(),
        updated_at=time.time(),
    )
