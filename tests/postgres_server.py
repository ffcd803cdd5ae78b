"""A real PostgreSQL server for the tests, started from Debian's ``postgresql`` package.

The server runs from a throw-away directory of its own, which holds its data and the Unix socket
its clients connect through, with trust authentication: two test runs on one machine each have
their own server, and neither can reach the other's (no TCP port to collide on, or to be taken
while a test has stopped its server). PostgreSQL refuses to run as root, so where the tests run
as root the server runs as the package's ``postgres`` user (``runuser``); elsewhere as the
current user.
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
from urllib.parse import quote

from gpu.shm.blocks import process_alive
from tests.conftest import ensure_debian_package

START_TIMEOUT_S = 60
PREFIX = "pacer-pg-"  # then the pid of the process that made the server, and a random part
# Without TCP, the port only names the socket file in the server's own directory.
SOCKET_PORT = 5432


class PostgresUnavailableError(RuntimeError):
    """The server cannot be had here; the message says why."""


def _binaries() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl`` (Debian keeps them off PATH), or the one
    ``PACER_PG_BIN`` names (a server unpacked elsewhere, on a host without the package)."""
    named = os.environ.get("PACER_PG_BIN")
    if named:
        if not (Path(named) / "initdb").is_file():
            raise PostgresUnavailableError(f"PACER_PG_BIN={named} holds no initdb")
        return Path(named)
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
    """One PostgreSQL cluster: ``start()``, ``url(database)``, ``create_database()``,
    ``drop_database(url)``, ``stop()``; ``halt()`` and ``resume()`` stop the server and start
    it again on its data and socket (the database out of reach for a while).

    Clients connect through the socket in the server's directory; a ``tcp`` one also listens
    on a free loopback port, and its URLs name that (the benchmarks' hosts connect over TCP, as
    a fleet's do). For tests it does not flush to disk (``fsync=off``,
    ``synchronous_commit=off``); a ``durable`` one, for benchmarks, commits as a production
    server does. ``cpus`` (a ``taskset`` list, as ``0,1``) keeps the server's processes on
    those CPUs. ``settings``: more server settings, by name (``-c name=value``)."""

    def __init__(
        self, durable: bool = False, tcp: bool = False, cpus: str | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.durable = durable
        self.tcp = tcp
        self.cpus = cpus
        self.settings = dict(settings or {})
        self._bin = _binaries()
        self._as_user: list[str] = []
        owner: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError as exc:
                raise PostgresUnavailableError("running as root and no 'postgres' user") from exc
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self.root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
        self.data = self.root / "data"
        if owner is not None:
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        os.chmod(self.root, 0o755)
        self.port = _free_port() if tcp else SOCKET_PORT
        self.user = "postgres" if owner is not None else pwd.getpwuid(os.geteuid()).pw_name
        self._databases = 0

    def _run(self, args: Sequence[str]) -> None:
        done = subprocess.run(
            [*self._as_user, *args], capture_output=True, text=True, timeout=START_TIMEOUT_S
        )
        if done.returncode != 0:
            raise PostgresUnavailableError(f"{args[0]} failed: {done.stderr.strip()[-2000:]}")

    def start(self) -> None:
        """Make the cluster and start the server, after stopping those of runs that were
        killed before they could (a server outlives the process that started it)."""
        for root in Path(tempfile.gettempdir()).glob(f"{PREFIX}*-*"):
            pid = root.name.removeprefix(PREFIX).partition("-")[0]
            if pid.isdigit() and not process_alive(int(pid)):
                self._remove(root)
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
        listen = "127.0.0.1" if self.tcp else "''"
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses={listen} -c max_connections=200"
        )
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        options += "".join(f" -c {name}={value}" for name, value in self.settings.items())
        log = str(self.root / "log")
        pg_ctl = str(self._bin / "pg_ctl")
        wait = ["-w", "-t", str(START_TIMEOUT_S)]
        pinned = [] if self.cpus is None else ["taskset", "-c", self.cpus]
        self._run([*pinned, pg_ctl, "-D", str(self.data), "-o", options, "-l", log, *wait, "start"])

    def standby(self) -> PostgresServer:
        """A streaming standby of this server, started: a server of its own (its directory,
        its socket) made from a base backup of this one, replaying its WAL until `promote`."""
        standby = PostgresServer(
            durable=self.durable, tcp=self.tcp, cpus=self.cpus, settings=self.settings
        )
        standby._databases = self._databases
        backup = str(self._bin / "pg_basebackup")
        source = f"host={self.root} port={self.port} user={self.user}"
        self._run(
            [backup, "-D", str(standby.data), "-R", "-X", "stream", "-c", "fast", "-d", source]
        )
        standby.resume()
        return standby

    def promote(self) -> None:
        """Make this standby the primary: it stops replaying and takes writes."""
        pg_ctl = str(self._bin / "pg_ctl")
        self._run([pg_ctl, "-D", str(self.data), "-w", "-t", str(START_TIMEOUT_S), "promote"])

    def halt(self) -> None:
        """Stop the server at once (its clients disconnected), keeping its data."""
        pg_ctl = str(self._bin / "pg_ctl")
        self._run([pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop"])

    def url(self, database: str = "postgres") -> str:
        if self.tcp:
            return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"
        return f"postgresql://{self.user}@/{database}?host={quote(str(self.root))}&port={self.port}"

    def create_database(self) -> str:
        """A fresh, empty database of a name never used on this server; its URL."""
        import psycopg

        self._databases += 1
        name = f"pacer_{self._databases}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop the database of ``url`` (one `create_database` made), ending the connections
        still open to it: its host names, their locks and its leases go with it."""
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        name = conninfo_to_dict(url)["dbname"]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        self._remove(self.root)

    def _remove(self, root: Path) -> None:
        """Stop the server of ``root``, if it runs, and remove its directory."""
        if (root / "data").exists():
            subprocess.run(
                [*self._as_user, str(self._bin / "pg_ctl"), "-D", str(root / "data"), "-m",
                 "immediate", "stop"], capture_output=True, timeout=START_TIMEOUT_S,
            )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)
