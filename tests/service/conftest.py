"""Fixtures of the service's tests: `pacer serve` as child processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu.shm.record import sweep
from tests.servers import ServerFactory, ServerProcess


@pytest.fixture
def server_factory(tmp_path: Path, shm_dir: str) -> Iterator[ServerFactory]:
    """``server_factory(PACER_X="1")``: a not yet started server sharing ``tmp_path``. Those
    still running after the test are killed, and what a killed pacer leaves in ``shm_dir``
    (its pool's blocks and record) is swept."""
    made: list[ServerProcess] = []

    def make(**env: str) -> ServerProcess:
        made.append(ServerProcess(tmp_path, **env))
        return made[-1]

    yield make
    running = [server for server in made if server.proc is not None and server.proc.poll() is None]
    for server in made:
        server.stop()
    if running:
        sweep(shm_dir, drop_kept=True)
