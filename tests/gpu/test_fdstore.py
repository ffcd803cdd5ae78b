"""The service manager's descriptor store, on a real unix datagram socket standing in for
systemd (not available here): a pool of memfd blocks handed to it as FDSTORE=1, one FDNAME a
block, and a real successor process that receives them as LISTEN_FDS and adopts the pool."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu.shm import fdstore
from gpu.shm.blocks import BLOCK_PREFIX
from tests.kept_pools import MARK, ROOT, Holder, ServiceManager, records

# The next process: adopts what the store passed back, prints what it found, then closes
# without keeping (the store is told to drop the blocks).
SUCCESSOR = """
import os
import numpy as np
from gpu.shm import fdstore
from gpu.pool.allocators import SharedHostAllocator
from gpu.shm.handover import Handover
from gpu.pool.pinned import PinnedPool
received = fdstore.listen_fds()
handover = Handover(True, "fdstore", received=received,
                    directory=os.environ["PACER_GPU__SHM_DIR"])
pool = PinnedPool.build(2, [(1024,)] * 3, np.uint32, SharedHostAllocator(False, handover))
held = sorted((pool.checkout() for _ in range(2)), key=lambda slot: slot.index)
print(len(received), pool.slots_adopted, *(int(slot.arrays[0][0]) for slot in held), flush=True)
for slot in held:
    slot.release()
pool.close(keep=False)
"""


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[ServiceManager]:
    made = ServiceManager(tmp_path)
    yield made
    made.close()


def test_store_size_needs_a_notify_socket() -> None:
    assert fdstore.store_size({"FDSTORE": "8"}) == 0
    assert fdstore.store_size({"NOTIFY_SOCKET": "/x", "FDSTORE": "8"}) == 8
    assert fdstore.store_size({"NOTIFY_SOCKET": "/x"}) == 0


def test_listen_fds_are_taken_once_and_only_by_their_process() -> None:
    read, write = os.pipe()
    try:
        environ = {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "1"}
        assert fdstore.listen_fds(environ) == []
        assert environ == {}  # a child never takes them for its own
    finally:
        os.close(read)
        os.close(write)


@pytest.mark.slow
def test_a_pool_in_the_descriptor_store_is_adopted_by_the_next_process(
    manager: ServiceManager, shm_dir: str
) -> None:
    holder = Holder(slots=2, store="fdstore", env=manager.environ)
    assert not [n for n in os.listdir(shm_dir) if n.startswith(BLOCK_PREFIX)]  # memfds
    holder.close(keep=True)
    manager.receive()
    assert sorted(manager.stored) == sorted(holder.names)  # one FDNAME a block
    ((_, record),) = records(shm_dir).items()
    assert (record.store, record.state) == ("fdstore", "kept")

    successor = manager.launch(
        [sys.executable, "-c", SUCCESSOR], {**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    output, _ = successor.communicate(timeout=60)
    assert successor.returncode == 0
    assert output.split() == ["2", "2", str(MARK), str(MARK + 1)]
    manager.receive()
    assert sorted(manager.removed) == sorted(holder.names)  # not kept: the store drops them
    assert records(shm_dir) == {}


@pytest.mark.slow
def test_a_store_that_did_not_pass_the_blocks_back_makes_the_record_stale(
    manager: ServiceManager, shm_dir: str
) -> None:
    holder = Holder(slots=2, store="fdstore", env=manager.environ)
    holder.close(keep=True)
    manager.receive()
    for fd in manager.stored.values():  # the unit was stopped for good: the store flushed
        os.close(fd)
    manager.stored.clear()
    successor = manager.launch(
        [sys.executable, "-c", SUCCESSOR], {**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    output, _ = successor.communicate(timeout=60)
    assert output.split()[:2] == ["0", "0"]
    assert records(shm_dir) == {}
