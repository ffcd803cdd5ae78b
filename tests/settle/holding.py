"""What another program's multiprocessing child runs in tests/settle/test_identity.py: map a
pool block, say so, and wait until its parent ends."""

from __future__ import annotations

import os
import time

from gpu.shm.blocks import open_block


def hold(directory: str, name: str) -> None:
    """Map block ``name`` of ``directory``, print "ready" and wait for the parent to end."""
    block = open_block(name, directory=directory)
    print("ready", flush=True)
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.05)  # a stand-in program's own loop; no test waits on it
    block.close()
