"""Fixtures of the `pacer settle` tests."""

from __future__ import annotations

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
