"""Fixtures of the service's tests: `pacer serve` as child processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import ServerFactory, ServerProcess


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[ServerFactory]:
    """``server_factory(PACER_X="1")``: a not yet started server sharing ``tmp_path``."""
    made: list[ServerProcess] = []

    def make(**env: str) -> ServerProcess:
        made.append(ServerProcess(tmp_path, **env))
        return made[-1]

    yield make
    for server in made:
        server.stop()
