"""A shared pool's blocks passed from one pacer to the next on the same host. Imports no NumPy.

On start, `Handover.claim` reads the records a predecessor left (`gpu.shm.record`). It adopts a
pool laid out like this one: it waits until no other process maps the blocks, maps them again,
renames them and takes over the record. Anything else is removed and logged.

On a clean stop, `keep` leaves the blocks for the next pacer; `release` removes them. With
``keep``, the record is written from the start, so a pacer killed outright also leaves an
adoptable pool (docs/decisions/restarts.md).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence

from gpu.shm import fdstore
from gpu.shm.block_maps import maps_inode, processes_mapping
from gpu.shm.blocks import (
    SHM_DIR,
    HostBlock,
    block_owner,
    next_name,
    open_block,
    remove_file,
    remove_stale_blocks,
)
from gpu.shm.record import (
    PoolLayout,
    PoolRecord,
    RecordFile,
    Store,
    new_record,
    survey,
)
from gpu.sizes import format_bytes

__all__ = ["ADOPT_WAIT_S", "Handover"]

logger = logging.getLogger("gpu.shm.handover")

ADOPT_WAIT_S = 30.0
"""How long a start waits for a dead pacer's processes to let go of its blocks; then the blocks
are given up (unlinked) and new ones allocated."""
POLL_S = 0.05


class Handover:
    """What a shared pool does with a predecessor's blocks, and with its own at the end.

    ``store`` is where kept blocks live: "shm" (files in ``directory``) or "fdstore" (memfds in the
    service manager's store). ``received`` are the (name, descriptor) pairs the store passed back.
    ``keep`` keeps the pool when it closes; `gpu.pool.pinned.PinnedPool.close` can also ask then.
    """

    def __init__(
        self,
        keep: bool = False,
        store: Store = "shm",
        *,
        received: Sequence[tuple[str, int]] = (),
        directory: str = SHM_DIR,
        wait_s: float = ADOPT_WAIT_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        if store == "fdstore" and not keep:
            raise ValueError(
                "the descriptor store holds kept pools only: store='fdstore' needs keep"
            )
        self.keep = keep
        self.store: Store = store
        self.directory = directory
        self.wait_s = wait_s
        self._received = dict(received)
        self._clock = clock
        self._sleep = sleep
        self._environ = environ
        self._file: RecordFile | None = None
        self._previous: PoolRecord | None = None
        self._layout: PoolLayout | None = None

    @classmethod
    def for_service(cls, keep: bool, slots: int, directory: str = SHM_DIR) -> Handover:
        """A service's handover for ``slots`` slots, with blocks and records in ``directory``.

        With ``keep``, blocks go to the descriptor store when it has room for every slot. Otherwise
        they stay in ``directory``, with a warning.
        """
        store_size = fdstore.store_size()
        store: Store = "shm"
        if keep and store_size:
            if store_size >= slots:
                store = "fdstore"
            else:
                logger.warning(
                    "the service manager's descriptor store takes %d descriptors, fewer than "
                    "the pool's %d slots: the pool is kept in %s instead (raise "
                    "FileDescriptorStoreMax=)", store_size, slots, directory,
                )  # fmt: skip
        return cls(keep, store, received=fdstore.listen_fds(), directory=directory)

    @property
    def memfd(self) -> bool:
        """Whether new blocks are memfds (for the descriptor store) rather than named files."""
        return self.store == "fdstore"

    # -- start ----------------------------------------------------------------------------------

    def claim(self, layout: PoolLayout, slots: int) -> list[HostBlock]:
        """Map up to ``slots`` blocks of a predecessor's pool laid out as ``layout``.

        Every other record and block that is of no more use is removed and logged.
        """
        self._layout = layout
        adopted: list[HostBlock] = []
        left_alone: set[str] = set()
        for file, record, why in survey(self.directory):
            if why is None and record is not None:
                why = self._unfit(record, layout)
            if why is None and record is not None and self._file is not None:
                left_alone |= set(record.blocks)  # a second kept pool: another pacer's to take
                file.close()
                continue
            if why is not None or record is None:
                logger.warning("removing the pool kept in %s: %s", file.path, why)
                self._drop(record)
                file.remove()
                continue
            blocks = self._take(record, file, slots)
            if blocks is None:
                continue
            adopted = blocks
        for name, fd in self._received.items():  # passed back, but of no pool adopted
            logger.warning("closing descriptor %s the service manager passed: no pool has it", name)
            os.close(fd)
            fdstore.remove(name, self._environ)
        self._received.clear()
        remove_stale_blocks(self.directory, left_alone)
        return adopted

    def _unfit(self, record: PoolRecord, layout: PoolLayout) -> str | None:
        if record.store == "fdstore":
            missing = [name for name in record.blocks if name not in self._received]
            if missing:
                return f"the service manager passed back {len(record.blocks) - len(missing)} of "\
                    f"its {len(record.blocks)} blocks"  # fmt: skip
        if not layout.fits(record.layout):
            return f"its {record.layout.words()} are not this pool's {layout.words()}"
        return None

    def _take(self, record: PoolRecord, file: RecordFile, slots: int) -> list[HostBlock] | None:
        """The record's blocks once no other process maps them; None if they stay held."""
        inodes = {maps_inode(*inode) for inode in self._inodes(record)}
        if not self._wait_for_holders(record, inodes):
            self._drop(record)
            file.remove()
            return None
        blocks = [self._open(name) for name in record.blocks]
        adopted, extra = blocks[:slots], blocks[slots:]
        for block in extra:
            self._discard(block)
        for block in adopted:
            owner = block_owner(block.name)
            if not block.memfd and owner != os.getpid():
                block.rename(next_name(self.directory))
        self._file, self._previous = file, record
        how = "stopped" if record.state == "kept" else "died"
        logger.info(
            "adopting %d of %d blocks (%s) that pacer %d left when it %s (generation %d)%s",
            len(adopted), len(blocks), format_bytes(len(adopted) * record.layout.slot_bytes),
            record.holder_pid, how, record.generation,
            f"; {len(extra)} beyond this pool's {slots} slots removed" if extra else "",
        )  # fmt: skip
        return adopted

    def _inodes(self, record: PoolRecord) -> list[tuple[int, int]]:
        found = []
        for name in record.blocks:
            stat = (
                os.fstat(self._received[name])
                if record.store == "fdstore"
                else os.stat(os.path.join(self.directory, name))
            )
            found.append((stat.st_dev, stat.st_ino))
        return found

    def _wait_for_holders(self, record: PoolRecord, inodes: set[tuple[str, int]]) -> bool:
        """Wait until only this process maps the blocks; return False after ``wait_s``."""
        deadline = self._clock() + self.wait_s
        told = False
        while holders := processes_mapping(inodes, skip={os.getpid()}):
            pids = ", ".join(map(str, sorted(holders)))
            if self._clock() >= deadline:
                logger.error(
                    "processes %s still map the blocks pacer %d left after %.0f s: not adopted; "
                    "their names are removed, and the memory comes back once those processes "
                    "end (pacer settle --kill-orphans)", pids, record.holder_pid, self.wait_s,
                )  # fmt: skip
                return False
            if not told:
                logger.warning(
                    "waiting for processes %s to let go of the blocks pacer %d left",
                    pids, record.holder_pid,
                )  # fmt: skip
                told = True
            self._sleep(POLL_S)
        return True

    def _open(self, name: str) -> HostBlock:
        if name in self._received:
            return open_block(name, fd=self._received.pop(name))
        return open_block(name, directory=self.directory)

    def _drop(self, record: PoolRecord | None) -> None:
        """Remove what ``record`` keeps: its named blocks, or its memfds in the store."""
        if record is None:
            return
        for name in record.blocks:
            if record.store == "fdstore":
                fd = self._received.pop(name, None)
                if fd is not None:
                    os.close(fd)
                fdstore.remove(name, self._environ)
            else:
                remove_file(os.path.join(self.directory, name))

    def _discard(self, block: HostBlock) -> None:
        if block.memfd:
            fdstore.remove(block.name, self._environ)
        block.unlink()

    # -- running --------------------------------------------------------------------------------

    def begin(self, blocks: Sequence[HostBlock]) -> None:
        """Start the pool's life with ``blocks``.

        With ``keep``, write the record (locked while held) and hand memfds to the store now, so
        even a crash leaves an adoptable pool. Without it, drop an adopted pool's record.
        """
        if self.keep:
            for block in blocks:
                if block.memfd and block.fd is not None:
                    fdstore.store(block.name, block.fd, self._environ)
            self._record("in-use", blocks)
            return
        if self._file is not None:
            self._file.remove()
            self._file = None
        for block in blocks:
            if block.memfd:
                fdstore.remove(block.name, self._environ)
            else:
                block.track()

    def keep_blocks(self, blocks: Sequence[HostBlock]) -> None:
        """Leave ``blocks`` for the next pacer; CUDA must have let go of them first.

        They are recorded as kept, memfds go to the store, and they are unmapped here. The lock goes
        last.
        """
        self._record("kept", blocks)
        for block in blocks:
            block.close()
        assert self._file is not None
        self._file.close()
        self._file = None

    def release(self, blocks: Sequence[HostBlock]) -> None:
        """Remove ``blocks`` and the record; the memory goes once no process maps them."""
        for block in blocks:
            self._discard(block)
        if self._file is not None:
            self._file.remove()
            self._file = None

    def _record(self, state: str, blocks: Sequence[HostBlock]) -> None:
        assert self._layout is not None, "claim first"
        store: Store = "fdstore" if blocks and blocks[0].memfd else "shm"
        record = new_record(
            self._layout, [b.name for b in blocks], store, self._previous,
            "kept" if state == "kept" else "in-use",
        )  # fmt: skip
        if self._file is None:
            self._file = RecordFile.new(self.directory)
        for block in blocks:
            block.untrack()
        self._file.write(record)
