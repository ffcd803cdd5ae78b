from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from gpu.shm.blocks import process_alive
from pacer.server import Server
from pacer.service.lifecycle import Service
from tests.servers import fake_host, settings_for
from tests.tiers import MARK_IT, REFUSED, refuse_starts, takes_a_slow_fixture
from tests.waits import wait_until

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


def pytest_sessionstart(session: pytest.Session) -> None:
    """Build matplotlib's font cache before any test runs: on a machine that has none, its
    first use asks ``fc-list`` for the system's fonts, a process that the fast tier refuses
    to whichever plotting test happens to come first."""
    import matplotlib

    if not any(Path(matplotlib.get_cachedir()).glob("fontlist-*.json")):
        import matplotlib.font_manager  # the import builds the cache


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A test that takes a process-starting fixture is slow without having to say so.
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        functions = [d.func for group in defs for d in group]
        if takes_a_slow_fixture(getattr(item, "fixturenames", ()), functions):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _fast_tier_starts_nothing(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """In a test not marked ``slow``: starting a process or listening on a socket fails the
    test, naming what it did (`tests.tiers.refuse_starts`), even where the code under test
    caught the error."""
    if request.node.get_closest_marker("slow") is not None:
        yield
        return
    refused = request.node.stash[REFUSED] = refuse_starts(monkeypatch)
    yield
    if refused:
        pytest.fail(f"a test not marked slow {refused[0]}: {MARK_IT}", pytrace=False)


@pytest.fixture(autouse=True)
def _clean_pacer_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests start from the defaults, whatever the developer's shell exports."""
    for key in list(os.environ):
        if key.startswith("PACER_"):
            monkeypatch.delenv(key)
    return


SHM_ROOT = "/dev/shm"
SHM_TEST_PREFIX = "pacer-test-"
"""Each test's directory: ``pacer-test-<pid>-<8 hex digits>``, for the pytest process."""
LEFT_WAIT_S = 2.0
"""How long a test's shared-memory directory may take to empty after the test: a process the
test stopped may still be closing its pool."""


@pytest.fixture(scope="session", autouse=True)
def _no_directory_of_a_dead_run() -> None:
    """Remove the test directories of test runs that were killed (their pytest process is
    gone); a live run's are its own."""
    for name in os.listdir(SHM_ROOT):
        pid, _, _ = name.removeprefix(SHM_TEST_PREFIX).partition("-")
        if name.startswith(SHM_TEST_PREFIX) and pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(os.path.join(SHM_ROOT, name), ignore_errors=True)


@pytest.fixture(autouse=True)
def shm_dir(_clean_pacer_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """This test's own tmpfs directory for shared pools' blocks and owner records, made under
    /dev/shm and named in PACER_GPU__SHM_DIR: settings made in the test, and processes it
    starts, use it. The test must leave it empty: whatever is left is removed, and the test
    fails naming it (a test that leaves a pool on purpose sweeps it: `gpu.shm.record.sweep`
    with ``drop_kept``)."""
    directory = os.path.join(SHM_ROOT, f"{SHM_TEST_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    os.mkdir(directory, 0o700)
    monkeypatch.setenv("PACER_GPU__SHM_DIR", directory)
    try:
        yield directory
    finally:
        left = _left_in(directory)
        shutil.rmtree(directory, ignore_errors=True)
    if left:
        pytest.fail(f"the test left in its shared-memory directory {directory}: "
                    f"{', '.join(left)}", pytrace=False)  # fmt: skip


def _left_in(directory: str) -> list[str]:
    """The files still in ``directory`` after LEFT_WAIT_S; none once it is empty."""
    try:
        wait_until(lambda: os.listdir(directory), f"{directory} to be empty",
                   done=lambda names: not names, timeout_s=LEFT_WAIT_S)  # fmt: skip
    except AssertionError:
        return sorted(os.listdir(directory))
    return []


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


def debian_command(command: str, package: str) -> str:
    """`ensure_debian_package`'s path; the test is skipped, saying why, where there is none."""
    path = ensure_debian_package(command, package)
    if path is None:
        pytest.skip(f"{command} missing and Debian's {package} package cannot be installed here")
    return path


@pytest.fixture(scope="session")
def promtool() -> str:
    return debian_command("promtool", "prometheus")


@pytest.fixture(scope="session")
def chromium() -> str:
    """Headless Chromium, for the status page seen in a real browser."""
    return debian_command("chromium", "chromium")


@pytest.fixture(scope="session")
def node() -> str:
    """Node.js, to run the status page's script on a virtual clock."""
    return debian_command("node", "nodejs")


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
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a fresh, empty database on the session's PostgreSQL server, the test's own:
    a fleet's host names, their advisory locks and leases are a database's, so they cannot
    meet another test's. Dropped after the test, with whatever connection is left to it."""
    url = postgres_server.create_database()
    yield url
    postgres_server.drop_database(url)


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
