from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from pacer.server import Server
from pacer.service.lifecycle import Service
from tests.servers import fake_host, settings_for

if TYPE_CHECKING:
    from tests.postgres_server import PostgresServer


class FakeClock:
    """A clock the test moves by hand: ``clock.advance(1.5)``."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def _clean_pacer_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests start from the defaults, whatever the developer's shell exports."""
    for key in list(os.environ):
        if key.startswith("PACER_"):
            monkeypatch.delenv(key)
    return


def ensure_debian_package(command: str, package: str) -> str | None:
    """Path of ``command``, installing Debian's ``package`` first when it is missing (the test
    machines are Debian and run as root). None where that cannot be done."""
    found = shutil.which(command)
    if found or shutil.which("apt-get") is None or os.geteuid() != 0:
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", package]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        subprocess.run(install, env=env, capture_output=True)
    return shutil.which(command)


@pytest.fixture(scope="session")
def promtool() -> str:
    path = ensure_debian_package("promtool", "prometheus")
    if path is None:
        pytest.skip("promtool missing and Debian's prometheus package cannot be installed here")
    return path


@contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server of its own (Debian's package, installed when missing), stopped
    and removed after; the test is skipped with the reason where there can be none."""
    from tests.postgres_server import PostgresServer, PostgresUnavailableError

    try:
        server = PostgresServer()
        server.start()
    except PostgresUnavailableError as exc:
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the session."""
    with running_postgres() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL of a fresh, empty database on the session's PostgreSQL server."""
    return postgres_server.create_database()


@pytest_asyncio.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    """A started in-process service on an ephemeral port, its journal in ``tmp_path``."""
    # A host with room for the default budget, whatever the machine running the tests has.
    roomy = fake_host(tmp_path / "host", total=2**41, available=2**40)
    svc = Server(
        Service.build(settings_for(tmp_path), registry=CollectorRegistry(), host_files=roomy)
    )
    await svc.start()
    yield svc
    if not svc.service.draining:
        await svc.shutdown()


@pytest.fixture(scope="session")
def no_pool_kept_here() -> None:
    """The kept-pool tests sweep /dev/shm, kept pools included. Where pool blocks or owner
    records were there before the tests started (a pacer's pool, kept for its successor, or
    another test run's), they skip rather than drop what is not theirs."""
    from gpu.shm.blocks import BLOCK_PREFIX, SHM_DIR
    from tests.kept_pools import records

    found = [*records(), *(n for n in os.listdir(SHM_DIR) if n.startswith(BLOCK_PREFIX))]
    if found:
        pytest.skip(f"{SHM_DIR} holds pacer pool blocks or records these tests would sweep: "
                    f"{', '.join(sorted(found)[:4])}{' …' if len(found) > 4 else ''}")  # fmt: skip
