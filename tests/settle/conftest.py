"""Fixtures of the `pacer settle` tests."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator

import pytest

from gpu.shm.blocks import BLOCK_PREFIX
from pacer.settle.held import HeldBlockScanner


@pytest.fixture
def only_own_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Live runs of the CLI look only for blocks no process makes (PID 0's), so that what
    other pacers on this host left mapped does not decide a test about something else."""

    def scanner(directory: str) -> HeldBlockScanner:
        return HeldBlockScanner(prefix=f"{BLOCK_PREFIX}0-", directory=directory)

    monkeypatch.setattr("pacer.settle.cli.HeldBlockScanner", scanner)


HOST_MEMORY_LOCK = "/tmp/pacer-tests-host-memory.lock"
"""Held by a test that judges the whole host's used memory while it holds it."""


@pytest.fixture
def host_memory_to_itself() -> Iterator[None]:
    """The host's used memory is shared by everything on it: a test that allocates gigabytes
    and then judges the whole host's memory takes this machine-wide lock (waiting for another
    suite's such test to end), so that two copies of the suite do not measure each other's
    gigabytes coming and going."""
    with open(HOST_MEMORY_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, however the test ends
        yield
