"""Shared-memory pool blocks in a tmpfs directory (each test's own, `shm_dir`): room checked
first, stale ones removed, live ones kept, one directory's apart from another's; and ``pacer
settle``, which removes them, imports no NumPy."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from gpu.pool.pinned import PinnedPool
from gpu.shm.blocks import BLOCK_PREFIX, check_room, create_block, remove_stale_blocks
from tests.kept_pools import shared, shm_exists
from tests.pool_holder import kill_holder, start_pool_holder


@pytest.mark.slow
def test_settle_removes_stale_blocks_without_importing_numpy(shm_dir: str) -> None:
    # The command line and the package `pacer settle` runs, its stale-block sweep included:
    # ExecStartPre on a host whose pool just died should not pay for NumPy's import.
    code = (
        "import sys\n"
        "import pacer.__main__, pacer.settle, pacer.settle.cli\n"
        "from pacer.settle.sources import Sample, StaleBlocksRemoved\n"
        "class Still:\n"
        "    def sample(self): return Sample(0)\n"
        "StaleBlocksRemoved(Still(), print, directory=sys.argv[1]).sample()\n"
        "assert 'numpy' not in sys.modules, 'numpy was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code, shm_dir], check=True, timeout=60)


def test_a_pool_larger_than_its_directory_has_is_refused_before_anything_is_written(
    monkeypatch: pytest.MonkeyPatch, shm_dir: str
) -> None:
    class Tiny:
        f_bavail, f_frsize = 16, 4096  # 64 KiB free

    monkeypatch.setattr("gpu.shm.blocks.os.statvfs", lambda path: Tiny())
    with pytest.raises(
        RuntimeError, match=rf"need 96\.0 KiB in {shm_dir}, which has 64\.0 KiB"
    ) as raised:
        PinnedPool.build(3, [(8192,)], np.uint32, backend=shared(shm_dir))
    assert "PACER_" not in str(raised.value)  # the device layer names no setting
    assert os.listdir(shm_dir) == []


def test_a_directory_that_does_not_exist_is_named_before_anything_is_written(
    shm_dir: str,
) -> None:
    missing = os.path.join(shm_dir, "missing")
    with pytest.raises(RuntimeError, match=f"pool slots, {missing}, does not exist: create it"):
        check_room(4096, missing)


@pytest.mark.slow
def test_blocks_of_a_killed_service_are_removed_by_the_next_pool(
    caplog: pytest.LogCaptureFixture, shm_dir: str
) -> None:
    holder, names = start_pool_holder()
    kill_holder(holder)
    assert all(shm_exists(shm_dir, name) for name in names)
    with caplog.at_level(logging.WARNING, logger="gpu.shm.blocks"):
        pool = PinnedPool.build(1, [(64,)], np.uint32, backend=shared(shm_dir))
    pool.close()
    assert not any(shm_exists(shm_dir, name) for name in names)
    assert f"removed 2 shared slot blocks (8.0 KiB) from {shm_dir} that process {holder.pid}" in (
        caplog.text
    )


@pytest.mark.slow
def test_blocks_of_a_live_service_and_of_this_process_stay(shm_dir: str) -> None:
    holder, names = start_pool_holder()
    try:
        pool = PinnedPool.build(2, [(64,)], np.uint32, backend=shared(shm_dir))
        slot = pool.checkout()
        mine = pool.slot_block(slot)
        assert mine is not None
        assert remove_stale_blocks(shm_dir) == (0, 0)
        assert all(shm_exists(shm_dir, name) for name in [*names, mine.name])
        slot.release()
        pool.close()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait()
        holder.stdout.close()  # type: ignore[union-attr]
    assert not shm_exists(shm_dir, mine.name)
    assert remove_stale_blocks(shm_dir)[0] == 2  # the holder is gone now
    assert not any(shm_exists(shm_dir, name) for name in names)


def test_a_block_with_this_pid_that_this_process_did_not_make_is_stale(shm_dir: str) -> None:
    # A restarted container's service has the PID its predecessor had (often 1).
    name = f"{BLOCK_PREFIX}{os.getpid()}-999999"
    with open(f"{shm_dir}/{name}", "wb") as block:
        block.write(b"x" * 5000)
    other = f"{BLOCK_PREFIX.removesuffix('-')}x-{os.getpid()}-1"  # not one of ours: kept
    with open(f"{shm_dir}/{other}", "wb"):
        pass
    try:
        removed, freed = remove_stale_blocks(shm_dir)
        assert removed == 1
        assert freed >= 5000
        assert not shm_exists(shm_dir, name)
        assert shm_exists(shm_dir, other)
    finally:
        os.unlink(f"{shm_dir}/{other}")


def test_a_block_this_process_holds_in_one_directory_is_not_live_in_another(
    shm_dir: str,
) -> None:
    # The same name in a second directory is another block: one this process did not make.
    other = os.path.join(shm_dir, "other")
    os.mkdir(other)
    block = create_block(4096, directory=shm_dir)
    try:
        with open(os.path.join(other, block.name), "wb") as copy:
            copy.write(b"x" * 4096)
        assert remove_stale_blocks(shm_dir) == (0, 0)
        assert remove_stale_blocks(other)[0] == 1
        assert os.listdir(other) == []
        assert shm_exists(shm_dir, block.name)
    finally:
        block.unlink()
        os.rmdir(other)


@pytest.mark.slow
def test_a_stale_block_that_cannot_be_removed_is_reported_and_skipped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, shm_dir: str
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
        assert remove_stale_blocks(shm_dir)[0] == 1
    assert f"cannot remove stale shared slot block {shm_dir}/{names[0]}" in caplog.text
    assert shm_exists(shm_dir, names[0])
    assert not shm_exists(shm_dir, names[1])
    real_unlink(f"{shm_dir}/{names[0]}")
