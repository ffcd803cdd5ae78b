"""A real pacer service: in-process on an ephemeral port, or as a child process; and the HTTP
calls tests make to it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pacer.cli.http_client import ApiError, Client
from pacer.config import Settings
from pacer.host.memory import HostFiles
from pacer.journal import JobState
from pacer.server import Server
from pacer.service.lifecycle import Service
from tests.waits import until

ROOT = Path(__file__).resolve().parents[1]
JSON = {"Content-Type": "application/json"}
ENDED = ("completed", "failed", "cancelled")
FAST = {"PACER_NTT__LOG_N": "8", "PACER_SYNTHESIS__THREADS_PER_SYNTHESIS": "1"}


def settings_for(tmp_path: Path, **env: str) -> Settings:
    """Settings as the environment would give them, with a journal in ``tmp_path``."""
    mp = pytest.MonkeyPatch()
    try:
        for key, value in {**FAST, "PACER_JOURNAL__PATH": str(tmp_path / "journal.sqlite"),
                           "PACER_API__PORT": "0", **env}.items():  # fmt: skip
            mp.setenv(key, value)
        return Settings()
    finally:
        mp.undo()


def fake_host(
    folder: Path,
    *,
    total: int,
    available: int,
    cgroup: str = "/",
    limits: dict[str, tuple[int | str, int]] | None = None,
) -> HostFiles:
    """A host's memory files, written under ``folder``: /proc/meminfo of a host of ``total``
    bytes, ``available`` of them available (MemAvailable); /proc/self/cgroup naming ``cgroup``
    (v2); and a cgroup filesystem where each of ``limits`` (a cgroup's path: its memory.max,
    bytes or "max", and its memory.current) is set. No limits: no cgroup limit."""
    folder.mkdir(parents=True, exist_ok=True)
    files = HostFiles(folder / "meminfo", folder / "self-cgroup", folder / "cgroup")
    files.meminfo.write_text(
        f"MemTotal:       {total // 1024} kB\nMemFree:        {available // 1024} kB\n"
        f"MemAvailable:   {available // 1024} kB\nHugePages_Total:       0\n"
    )
    files.self_cgroup.write_text(f"0::{cgroup}\n")
    for path, (limit, current) in (limits or {}).items():
        where = files.cgroup_root / path.lstrip("/")
        where.mkdir(parents=True, exist_ok=True)
        (where / "memory.max").write_text(f"{limit}\n")
        (where / "memory.current").write_text(f"{current}\n")
    return files


def url(server: Server, path: str) -> str:
    return f"http://127.0.0.1:{server.port}{path}"


async def call(
    server: Server, method: str, path: str, body: Any = None, raw: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:  # fmt: skip
    async with aiohttp.ClientSession() as session:
        data = raw if raw is not None else (None if body is None else aiohttp.JsonPayload(body))
        async with session.request(method, url(server, path), data=data, headers=headers) as r:
            payload = await r.json() if r.content_type == "application/json" else await r.text()
            return r.status, payload


async def until_done(server: Server, job_id: str) -> dict[str, Any]:
    """The job's detail (``GET /v1/jobs/{id}``) once it has ended."""

    async def detail() -> dict[str, Any]:
        status, job = await call(server, "GET", f"/v1/jobs/{job_id}")
        assert status == 200, job
        return dict(job)

    return await until(detail, f"job {job_id} to end", done=lambda job: job["state"] in ENDED,
                       every_s=0.02)  # fmt: skip


async def until_completed(service: Service, job_id: str) -> None:
    """Wait until the journal holds ``job_id`` completed (a service without HTTP included)."""
    await until(lambda: service.db(service.journal.get_job, job_id), f"job {job_id} to complete",
                done=lambda job: job is not None and job.state is JobState.COMPLETED)  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """``pacer serve`` as a child process with its own journal file and port."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.port = free_port()
        self.log_path = tmp_path / f"serve-{self.port}.log"
        self.env = {
            **os.environ, **FAST,
            "PACER_JOURNAL__PATH": str(tmp_path / "journal.sqlite"),
            "PACER_API__PORT": str(self.port),
            **env,
        }  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None
        self.client = Client(f"http://127.0.0.1:{self.port}")

    def launch(self) -> ServerProcess:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pacer", "serve"], env=self.env, cwd=ROOT,
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        return self

    def start(self) -> ServerProcess:
        self.launch()
        self.client.wait_ready(30)
        return self

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def wait(self, timeout: float = 30) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def metrics_text(self) -> str:
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            return str(response.read().decode())

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


ServerFactory = Callable[..., ServerProcess]


def readyz_refuses(client: Client, reason: str) -> bool:
    """Whether ``/readyz`` answers an error naming ``reason`` (a condition to wait for)."""
    try:
        client.request("GET", "/readyz")
    except ApiError as exc:
        return reason in str(exc)
    return False
