"""Pools kept for the next pacer, made by real processes: a holder that builds a shared pool
with a handover, marks its slots, and keeps it (or is killed holding it), for the tests that
adopt what it leaves. Every pool here lives in the test's own directory (``shm_dir``, which
PACER_GPU__SHM_DIR names to the processes a test starts)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from gpu.pool.allocators import SharedHostAllocator
from gpu.shm.handover import Handover
from gpu.shm.record import RECORD_PREFIX, PoolRecord

ROOT = Path(__file__).resolve().parents[1]

# A pacer's pool as the GPU workload builds it, shared and handed over, in the directory
# PACER_GPU__SHM_DIR names: it writes MARK into each slot, prints its block names and paths,
# then on "keep" closes keeping the pool and exits; on end of input it waits (to be killed, or
# closes without keeping).
HOLD = """
import os, sys
import numpy as np
from gpu.pool.allocators import SharedHostAllocator
from gpu.shm.handover import Handover
from gpu.pool.pinned import PinnedPool
slots, n, keep, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "keep", sys.argv[4]
handover = Handover(keep, store, directory=os.environ["PACER_GPU__SHM_DIR"])
pool = PinnedPool.build(slots, [(n,)] * 3, np.uint32, SharedHostAllocator(False, handover),
                  field="babybear")
held = [pool.checkout() for _ in range(slots)]
for index, slot in enumerate(held):
    slot.arrays[0][:] = 1000 + index
    slot.release()
print(" ".join(pool.block_names), flush=True)
print(" ".join(pool.block_paths), flush=True)
command = sys.stdin.readline().strip()
pool.close(keep=command == "keep")
print("closed", flush=True)
"""

MARK = 1000
"""Slot i of a holder's pool holds MARK + i in its first array."""


class Holder:
    """A process holding a shared pool of ``slots`` slots of 3 × ``n`` uint32."""

    def __init__(
        self,
        slots: int = 2,
        n: int = 1024,
        *,
        keep: bool = True,
        store: str = "shm",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(slots), str(n), "keep" if keep else "", store],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        )  # fmt: skip
        assert self.proc.stdout is not None
        self.names = self.proc.stdout.readline().split()
        self.paths = self.proc.stdout.readline().split()
        assert len(self.names) == slots, "the holder did not start"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def close(self, keep: bool = True) -> None:
        """Close the pool (keeping it, or not) and wait for the process to end."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write("keep\n" if keep else "free\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "closed"
        self.end()

    def kill(self) -> None:
        """SIGKILL, as the OOM killer would: nothing is closed, the record stays "in-use"."""
        self.proc.kill()
        self.end()

    def end(self) -> None:
        self.proc.wait(30)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def shared(directory: str, register: bool = False) -> SharedHostAllocator:
    """The "shared" pool backend (or "shared-cuda", with ``register``), its blocks in
    ``directory``."""
    return SharedHostAllocator(register, Handover(directory=directory))


def records(directory: str) -> dict[str, PoolRecord]:
    """The owner records in ``directory`` that can be read, by file name."""
    found = {}
    for name in sorted(os.listdir(directory)):
        if name.startswith(RECORD_PREFIX) and name.endswith(".json"):
            try:
                found[name] = PoolRecord.from_json(Path(directory, name).read_text())
            except (OSError, ValueError):
                continue
    return found


def shm_exists(directory: str, name: str) -> bool:
    return os.path.exists(os.path.join(directory, name))


# A process that maps a block and holds it until its input ends: what a crashed pacer's
# synthesis process would be while it lingers.
MAP_AND_WAIT = """
import mmap, os, sys
descriptor = os.open(sys.argv[1], os.O_RDWR)
mapping = mmap.mmap(descriptor, os.fstat(descriptor).st_size)
print("mapped", flush=True)
sys.stdin.read()
"""


def start_mapper(path: str) -> subprocess.Popen[str]:
    """A process mapping the block at ``path`` until its input closes."""
    mapper = subprocess.Popen(
        [sys.executable, "-c", MAP_AND_WAIT, path],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert mapper.stdout is not None
    assert mapper.stdout.readline().strip() == "mapped"
    return mapper


def stop(process: subprocess.Popen[str]) -> None:
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            pipe.close()
    process.wait(30)


# The service manager's side of a start: the descriptors it stored placed at 3, 4, … and
# LISTEN_* set for this very process (LISTEN_PID is its own), then the program itself.
LAUNCH = """
import os, sys
count = int(sys.argv[1])
fds, names = sys.argv[2 : 2 + count], sys.argv[2 + count : 2 + 2 * count]
argv = sys.argv[2 + 2 * count :]
for index, fd in enumerate(fds):
    os.dup2(int(fd), 1000 + index)
    os.close(int(fd))
for index in range(count):
    os.dup2(1000 + index, 3 + index)  # inheritable, as systemd passes them
    os.close(1000 + index)
os.environ.update(LISTEN_FDS=str(count), LISTEN_FDNAMES=":".join(names))
os.environ["LISTEN_PID"] = str(os.getpid())
os.execv(argv[0], argv)
"""


class ServiceManager:
    """systemd's side of the notify protocol, on a real unix datagram socket: what a process
    told it (READY=1, STATUS=…), the descriptors it stored (FDSTORE=1, by FDNAME, the same name
    twice keeping the last) and removed (FDSTOREREMOVE=1), and `launch`, which starts the next
    process with the stored descriptors as systemd passes them."""

    def __init__(self, directory: Path, store_size: int = 64) -> None:
        import socket
        import threading

        self.path = directory / "notify"
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind(str(self.path))
        self.socket.setblocking(False)
        self.environ = {"NOTIFY_SOCKET": str(self.path), "FDSTORE": str(store_size)}
        self.stored: dict[str, int] = {}
        self.removed: list[str] = []
        self.messages: list[str] = []
        # Read as systemd does, all the time: a sender blocks once the socket's queue is full.
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        import select

        while not self._closed.is_set():
            if select.select([self.socket], [], [], 0.05)[0]:
                self.receive()

    def receive(self) -> None:
        """Take every datagram waiting."""
        with self._lock:
            if not self._closed.is_set():
                self._take()

    def _take(self) -> None:
        import array
        import socket

        while True:
            try:
                data, ancillary, _, _ = self.socket.recvmsg(4096, socket.CMSG_SPACE(4 * 16))
            except BlockingIOError:
                return
            fds = array.array("i")
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
            message = data.decode()
            self.messages.append(message)
            fields = dict(line.partition("=")[::2] for line in message.splitlines())
            name = fields.get("FDNAME", "stored")
            if fields.get("FDSTORE") == "1":
                for fd in fds:
                    if name in self.stored:
                        os.close(self.stored[name])
                    self.stored[name] = fd
            elif fields.get("FDSTOREREMOVE") == "1" and name in self.stored:
                os.close(self.stored.pop(name))
                self.removed.append(name)
            else:
                for fd in fds:
                    os.close(fd)

    def launch(
        self, argv: list[str], env: Mapping[str, str], **popen: object
    ) -> subprocess.Popen[str]:
        """``argv`` started as the unit's next process, given every stored descriptor."""
        self.receive()
        names = sorted(self.stored)
        fds = [str(self.stored[name]) for name in names]
        return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
            [sys.executable, "-c", LAUNCH, str(len(names)), *fds, *names, *argv],
            pass_fds=[self.stored[name] for name in names], text=True,
            env={**env, **self.environ}, **popen,
        )  # fmt: skip

    def close(self) -> None:
        self._closed.set()
        self._reader.join()
        for fd in self.stored.values():
            os.close(fd)
        self.stored.clear()
        self.socket.close()
