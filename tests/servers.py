"""A real pacer service: in-process on an ephemeral port, or as a child process; and the HTTP
calls tests make to it."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pacer.client import ApiError, BlockingClient
from pacer.config import Settings
from pacer.host.memory import HostFiles
from pacer.journal import JobState
from pacer.server import Server
from pacer.service.lifecycle import Service
from tests.waits import until, wait_until

ROOT = Path(__file__).resolve().parents[1]
JSON = {"Content-Type": "application/json"}
ENDED = ("completed", "failed", "cancelled")
FAST = {"PACER_NTT__LOG_N": "8", "PACER_SYNTHESIS__THREADS_PER_SYNTHESIS": "1"}
# How long `pacer serve` may take to serve: seconds where it is ready, on a loaded machine.
READY_S = 90.0
SERVING = re.compile(r"pacer ready on http://\S+:(\d+) ")


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
    """A loopback port free now, for a program that takes its port only by number: another
    process may take it before that program does (a port of 0 is better where it can do)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def refusing_port() -> Iterator[int]:
    """A loopback port that refuses connections while the block runs: bound and never
    listening, so that no other process can listen there meanwhile."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


class ServerProcess:
    """``pacer serve`` as a child process with its own journal file. It serves on a port the
    OS gives it, unless ``PACER_API__PORT`` names one: ``port`` and ``client`` are known once
    it serves (they wait for it to say so, `READY_S` at most)."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.env = {
            **os.environ, **FAST,
            "PACER_JOURNAL__PATH": str(tmp_path / "journal.sqlite"),
            "PACER_API__PORT": "0",
            **env,
        }  # fmt: skip
        self._port = int(self.env["PACER_API__PORT"]) or None
        self._client: BlockingClient | None = None
        fd, log = tempfile.mkstemp(prefix="serve-", suffix=".log", dir=tmp_path)
        os.close(fd)
        self.log_path = Path(log)
        self._log_from = 0  # where the log of the process launched last begins
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        """The port it serves on."""
        if self._port is None:
            serving = wait_until(self._serving_port, "pacer serve to serve", timeout_s=READY_S)
            assert serving is not None
            self._port = serving
        return self._port

    @property
    def client(self) -> BlockingClient:
        if self._client is None:
            # No retries: a test sees each answer as the service gives it, Retry-After or not.
            self._client = BlockingClient(f"http://127.0.0.1:{self.port}", retries=0)
        return self._client

    def _serving_port(self) -> int | None:
        """The port the log says it serves on; None until then. AssertionError, with the log,
        once the process has ended without serving."""
        found = SERVING.search(
            self.log_path.read_bytes()[self._log_from :].decode(errors="replace")
        )
        if found is not None:
            return int(found.group(1))
        if self.proc is None:
            raise AssertionError("pacer serve was not launched")
        if self.proc.poll() is not None:
            raise AssertionError(f"pacer serve exited with status {self.proc.returncode} before "
                                 f"it served; its log ends:\n{self.log[-3000:]}")  # fmt: skip
        return None

    def launch(self) -> ServerProcess:
        if not int(self.env["PACER_API__PORT"]):
            self._port = self._client = None  # the port of the process launched now
        self._log_from = self.log_path.stat().st_size
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pacer", "serve"], env=self.env, cwd=ROOT,
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        return self

    def start(self) -> ServerProcess:
        self.launch()
        self.client.wait_ready(READY_S)
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


def readyz_refuses(client: BlockingClient, reason: str) -> bool:
    """Whether ``/readyz`` answers an error naming ``reason`` (a condition to wait for)."""
    try:
        client.request("GET", "/readyz")
    except ApiError as exc:
        return reason in str(exc)
    return False
