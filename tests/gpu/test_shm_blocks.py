"""Shared-memory pool blocks in /dev/shm: room checked first, stale ones removed, live ones
kept; and ``pacer settle``, which removes them, imports no NumPy."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from gpu.pool.pinned import PinnedPool
from gpu.shm.blocks import BLOCK_PREFIX, remove_stale_blocks
from tests.pool_holder import kill_holder, start_pool_holder


def shm_exists(name: str) -> bool:
    return os.path.exists(f"/dev/shm/{name.lstrip('/')}")


def test_settle_removes_stale_blocks_without_importing_numpy() -> None:
    # The command line and the package `pacer settle` runs, its stale-block sweep included:
    # ExecStartPre on a host whose pool just died should not pay for NumPy's import.
    code = (
        "import sys\n"
        "import pacer.__main__, pacer.settle, pacer.settle.cli\n"
        "from pacer.settle.sources import Sample, StaleBlocksRemoved\n"
        "class Still:\n"
        "    def sample(self): return Sample(0)\n"
        "StaleBlocksRemoved(Still(), print).sample()\n"
        "assert 'numpy' not in sys.modules, 'numpy was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_pool_larger_than_dev_shm_is_refused_before_anything_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Tiny:
        f_bavail, f_frsize = 16, 4096  # 64 KiB free

    monkeypatch.setattr("gpu.shm.blocks.os.statvfs", lambda path: Tiny())
    with pytest.raises(
        RuntimeError, match=r"need 96\.0 KiB in /dev/shm, which has 64\.0 KiB"
    ) as raised:
        PinnedPool.build(3, [(8192,)], np.uint32, backend="shared")
    assert "PACER_SYNTHESIS__EXECUTOR=threads" in str(raised.value)
    mine = f"{BLOCK_PREFIX}{os.getpid()}-"  # other processes' pools may be there
    assert not any(name.startswith(mine) for name in os.listdir("/dev/shm"))


def test_blocks_of_a_killed_service_are_removed_by_the_next_pool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    holder, names = start_pool_holder()
    kill_holder(holder)
    assert all(shm_exists(name) for name in names)
    with caplog.at_level(logging.WARNING, logger="gpu.shm.blocks"):
        pool = PinnedPool.build(1, [(64,)], np.uint32, backend="shared")
    pool.close()
    assert not any(shm_exists(name) for name in names)
    assert f"removed 2 shared slot blocks (8.0 KiB) from /dev/shm that process {holder.pid}" in (
        caplog.text
    )


def test_blocks_of_a_live_service_and_of_this_process_stay() -> None:
    holder, names = start_pool_holder()
    try:
        pool = PinnedPool.build(2, [(64,)], np.uint32, backend="shared")
        slot = pool.checkout()
        mine = pool.slot_block(slot)
        assert mine is not None
        assert remove_stale_blocks() == (0, 0)
        assert all(shm_exists(name) for name in [*names, mine.name])
        slot.release()
        pool.close()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait()
        holder.stdout.close()  # type: ignore[union-attr]
    assert not shm_exists(mine.name)
    assert remove_stale_blocks()[0] == 2  # the holder is gone now
    assert not any(shm_exists(name) for name in names)


def test_a_block_with_this_pid_that_this_process_did_not_make_is_stale(tmp_path: object) -> None:
    # A restarted container's service has the PID its predecessor had (often 1).
    name = f"{BLOCK_PREFIX}{os.getpid()}-999999"
    with open(f"/dev/shm/{name}", "wb") as block:
        block.write(b"x" * 5000)
    other = f"{BLOCK_PREFIX.removesuffix('-')}x-{os.getpid()}-1"  # not one of ours: kept
    with open(f"/dev/shm/{other}", "wb"):
        pass
    try:
        removed, freed = remove_stale_blocks()
        assert removed == 1
        assert freed >= 5000
        assert not shm_exists(name)
        assert shm_exists(other)
    finally:
        os.unlink(f"/dev/shm/{other}")


def test_a_stale_block_that_cannot_be_removed_is_reported_and_skipped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    holder, names = start_pool_holder()
    kill_holder(holder)
    real_unlink = os.unlink

    def unlink(path: str) -> None:
        if path.endswith(names[0]):
            raise PermissionError(1, "Operation not permitted", path)  # root's, say
        real_unlink(path)

    monkeypatch.setattr("gpu.shm.blocks.os.unlink", unlink)
    with caplog.at_level(logging.WARNING, logger="gpu.shm.blocks"):
        assert remove_stale_blocks()[0] == 1
    assert f"cannot remove stale shared slot block /dev/shm/{names[0]}" in caplog.text
    assert shm_exists(names[0])
    assert not shm_exists(names[1])
    real_unlink(f"/dev/shm/{names[0]}")
