"""A child process holding an open shared-memory pool, as a service would, for the tests that
kill it and look at what it leaves in the test's directory (PACER_GPU__SHM_DIR)."""

from __future__ import annotations

import subprocess
import sys

from gpu.shm.blocks import BLOCK_PREFIX

# A service's pool that is still open, in the directory PACER_GPU__SHM_DIR names: it reports
# its block names, then waits to be killed. Multiprocessing's resource tracker removes blocks
# in /dev/shm only, so none removes these, as when the tracker dies with the service (the OOM
# killer or a container stop takes every process): only the sweep can remove them.
HOLD_A_POOL = """
import os, sys
import numpy as np
from gpu.pool.allocators import SharedHostAllocator
from gpu.shm.handover import Handover
from gpu.pool.pinned import PinnedPool
shared = SharedHostAllocator(False, Handover(directory=os.environ["PACER_GPU__SHM_DIR"]))
pool = PinnedPool.build(2, [(1024,)] * 3, np.uint32, backend=shared)
for index in range(2):
    slot = pool.checkout()
    slot.arrays[0][:] = 7  # written: the blocks hold memory
    print(pool.slot_block(slot).name, flush=True)
sys.stdin.read()
"""


def start_pool_holder() -> tuple[subprocess.Popen[str], list[str]]:
    """The holder, started, and the names of its two blocks."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_A_POOL],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    names = [holder.stdout.readline().strip() for _ in range(2)]
    assert all(name.startswith(f"{BLOCK_PREFIX}{holder.pid}-") for name in names)
    return holder, names


def kill_holder(holder: subprocess.Popen[str]) -> None:
    """SIGKILL, as the OOM killer would: no close, no unlink, and tmpfs keeps the blocks."""
    holder.kill()
    holder.wait()
    for pipe in (holder.stdout, holder.stdin):
        if pipe is not None:
            pipe.close()


# A service's pool with its synthesis processes started, each having mapped both blocks and
# one having written a slot. It reports its block names and its forkserver's PID, then fills the
# slot again for each line it reads, saying how many times the workers were replaced.
HOLD_A_POOL_WITH_SYNTHESIS = """
import os, sys
from multiprocessing import forkserver
import numpy as np
from gpu.pool.allocators import SharedHostAllocator
from gpu.shm.handover import Handover
from gpu.pool.pinned import PinnedPool
from gpu.procs.executor import ProcessSynthesizer
shared = SharedHostAllocator(False, Handover(directory=os.environ["PACER_GPU__SHM_DIR"]))
pool = PinnedPool.build(2, [(1024,)] * 3, np.uint32, backend=shared)
synthesizer = ProcessSynthesizer(2, pool.block_paths)
synthesizer.start()
slot = pool.checkout()
synthesizer.fill(pool.slot_block(slot), 3, 0)
print(*pool.block_names, forkserver._forkserver._forkserver_pid, flush=True)
for line in sys.stdin:
    synthesizer.fill(pool.slot_block(slot), 3, 1)
    print("restarts", synthesizer.restarts, flush=True)
"""


def start_synthesis_holder() -> tuple[subprocess.Popen[str], list[str], int]:
    """A process holding a pool and two synthesis processes; its blocks' names, and the PID of
    its forkserver."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_A_POOL_WITH_SYNTHESIS],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    *names, forkserver = holder.stdout.readline().split()
    assert len(names) == 2, "the holder did not start"
    return holder, names, int(forkserver)
