"""A real PostgreSQL server for the tests, started from Debian's ``postgresql`` package.

The server runs from a throw-away data directory on a free loopback port with trust
authentication. PostgreSQL refuses to run as root, so where the tests run as root the server
runs as the package's ``postgres`` user (``runuser``); elsewhere as the current user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tests.conftest import ensure_debian_package

START_TIMEOUT_S = 60


class PostgresUnavailableError(RuntimeError):
    """The server cannot be had here; the message says why."""


def _binaries() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl`` (Debian keeps them off PATH)."""
    if ensure_debian_package("psql", "postgresql") is None:
        raise PostgresUnavailableError(
            "PostgreSQL missing and Debian's postgresql package cannot be installed here "
            "(needs apt-get and root)"
        )
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise PostgresUnavailableError("postgresql is installed but initdb was not found")
    return Path(initdb).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One PostgreSQL cluster: ``start()``, ``url(database)``, ``create_database()``, ``stop()``;
    ``halt()`` and ``resume()`` stop the server and start it again on its data and port (the
    database out of reach for a while).

    For tests it does not flush to disk (``fsync=off``, ``synchronous_commit=off``); a
    ``durable`` one, for benchmarks, commits as a production server does."""

    def __init__(self, durable: bool = False) -> None:
        self.durable = durable
        self._bin = _binaries()
        self._as_user: list[str] = []
        owner: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError as exc:
                raise PostgresUnavailableError("running as root and no 'postgres' user") from exc
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self.root = Path(tempfile.mkdtemp(prefix="pacer-pg-"))
        self.data = self.root / "data"
        if owner is not None:
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        os.chmod(self.root, 0o755)
        self.port = _free_port()
        self.user = "postgres" if owner is not None else pwd.getpwuid(os.geteuid()).pw_name
        self._databases = 0

    def _run(self, args: Sequence[str]) -> None:
        done = subprocess.run(
            [*self._as_user, *args], capture_output=True, text=True, timeout=START_TIMEOUT_S
        )
        if done.returncode != 0:
            raise PostgresUnavailableError(f"{args[0]} failed: {done.stderr.strip()[-2000:]}")

    def start(self) -> None:
        initdb = str(self._bin / "initdb")
        self._run(
            [
                initdb,
                "-D",
                str(self.data),
                "-A",
                "trust",
                "-U",
                self.user,
                "--no-sync",
                "-E",
                "UTF8",
            ]
        )
        self.resume()

    def resume(self) -> None:
        """Start the server on its data directory and port (after `halt`, or `start`'s)."""
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=200"
        )
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        log = str(self.root / "log")
        pg_ctl = str(self._bin / "pg_ctl")
        wait = ["-w", "-t", str(START_TIMEOUT_S)]
        self._run([pg_ctl, "-D", str(self.data), "-o", options, "-l", log, *wait, "start"])

    def halt(self) -> None:
        """Stop the server at once (its clients disconnected), keeping its data."""
        pg_ctl = str(self._bin / "pg_ctl")
        self._run([pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop"])

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A fresh, empty database; its URL."""
        import psycopg

        self._databases += 1
        name = f"pacer_{self._databases}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        if self.data.exists():
            subprocess.run(
                [*self._as_user, str(self._bin / "pg_ctl"), "-D", str(self.data), "-m",
                 "immediate", "stop"], capture_output=True, timeout=START_TIMEOUT_S,
            )  # fmt: skip
        shutil.rmtree(self.root, ignore_errors=True)
