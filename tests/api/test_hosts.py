"""DNS rebinding: the API answers only to its own names. A request whose Host or Origin names
another site is refused before it changes anything, against a real in-process service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from pacer.api.hosts import HostNames
from pacer.server import Server
from pacer.service.lifecycle import Service
from tests.servers import call, settings_for

EVIL = "rebind.evil.example"


@pytest_asyncio.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    settings = settings_for(tmp_path, PACER_API__ALLOWED_HOSTS="pacer.internal, Gpu-17.")
    svc = Server(Service.build(settings, CollectorRegistry()))
    await svc.start()
    yield svc
    await svc.shutdown()


@pytest.mark.parametrize(
    ("header", "allowed"),
    [
        ("127.0.0.1:9470", True), ("[::1]:9470", True), ("10.1.2.3", True),
        ("localhost:9470", True), ("api.localhost", True), ("pacer.internal:9470", True),
        ("GPU-17", True), ("gpu-17.", True), (EVIL, False), (f"{EVIL}:9470", False),
        ("127.0.0.1.evil.example", False), ("", False), ("[::1", False),
    ],
)  # fmt: skip
def test_a_host_header_names_this_service_or_is_refused(header: str, allowed: bool) -> None:
    names = HostNames("127.0.0.1", frozenset({"pacer.internal", "gpu-17"}))
    assert names.allows_host(header) is allowed


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [("http://localhost:3000", True), ("https://pacer.internal", True),
     (f"http://{EVIL}", False), ("null", False), ("file://", False)],
)  # fmt: skip
def test_an_origin_names_this_service_or_is_refused(origin: str, allowed: bool) -> None:
    assert HostNames("127.0.0.1", frozenset({"pacer.internal"})).allows_origin(origin) is allowed


def test_a_star_allows_any_name_and_the_bound_name_is_allowed() -> None:
    assert HostNames("0.0.0.0", frozenset({"*"})).allows_host(EVIL)
    assert HostNames("gpu-17.example", frozenset()).allows_host("GPU-17.example:9470")


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("POST", "/v1/jobs", {"partitions": 1}), ("PATCH", "/v1/controller", {"kp": 0.5}),
     ("GET", "/v1/status", None), ("GET", "/readyz", None), ("GET", "/", None)],
    ids=["submit", "retune", "status", "readyz", "status-page"],
)  # fmt: skip
async def test_a_rebound_name_is_refused_and_changes_nothing(
    server: Server, method: str, path: str, body: object
) -> None:
    kp = server.service.controller.settings.kp
    status, refused = await call(server, method, path, body, headers={"Host": f"{EVIL}:80"})
    assert (status, refused["field"]) == (421, "Host")
    assert refused["error"].startswith(f"pacer does not answer to the host name '{EVIL}:80'")
    assert "PACER_API__ALLOWED_HOSTS" in refused["error"]
    origin = {"Host": f"127.0.0.1:{server.port}", "Origin": f"http://{EVIL}"}
    status, refused = await call(server, method, path, body, headers=origin)
    assert (status, refused["field"]) == (403, "Origin")
    _, jobs = await call(server, "GET", "/v1/jobs")
    assert jobs["jobs"] == []  # nothing was accepted
    assert server.service.controller.settings.kp == kp  # nor retuned


@pytest.mark.asyncio
@pytest.mark.parametrize("host", ["localhost", "pacer.internal", "gpu-17"])
async def test_its_own_names_are_answered(server: Server, host: str) -> None:
    headers = {"Host": f"{host}:{server.port}", "Origin": f"http://{host}:{server.port}"}
    status, job = await call(server, "POST", "/v1/jobs", {"partitions": 1}, headers=headers)
    assert status == 202, job
