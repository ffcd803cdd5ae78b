"""The service manager's descriptor store: memfd blocks given to systemd and got back on restart.

systemd keeps descriptors a service sends with ``FDSTORE=1`` across a restart of the unit. It
passes them to the next process as descriptors 3, 4, … with ``LISTEN_FDS`` and friends
(sd_listen_fds(3)). The unit needs ``FileDescriptorStoreMax=``. A memfd kept there belongs to
the unit and goes when the unit stops for good (docs/decisions/restarts.md, D112).

This module imports no NumPy.

>>> store_size({"NOTIFY_SOCKET": "/run/notify", "FDSTORE": "64"}), store_size({})
(64, 0)
"""

from __future__ import annotations

import array
import fcntl
import logging
import os
import socket
from collections.abc import Mapping, MutableMapping, Sequence

__all__ = ["LISTEN_FDS_START", "listen_fds", "notify", "remove", "store", "store_size"]

logger = logging.getLogger("gpu.shm.fdstore")

LISTEN_FDS_START = 3
"""The first descriptor the service manager passes (SD_LISTEN_FDS_START)."""


def store_size(environ: Mapping[str, str] = os.environ) -> int:
    """How many descriptors the store takes for this service; 0 where there is no store."""
    if not environ.get("NOTIFY_SOCKET"):
        return 0
    size = environ.get("FDSTORE", "0")
    return int(size) if size.isdigit() else 0


def notify(message: str, fds: Sequence[int] = (), environ: Mapping[str, str] = os.environ) -> bool:
    """Send ``message`` to the notify socket with ``fds`` attached; return whether it was sent.

    Returns False where there is no socket or the send failed (logged).
    """
    address = environ.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.sendmsg([message.encode()], rights, 0, address)
        except OSError as error:
            logger.warning("cannot send %r to the service manager: %s", message[:40], error)
            return False
    return True


def store(name: str, fd: int, environ: Mapping[str, str] = os.environ) -> bool:
    """Hand ``fd`` to the store under ``name`` (FDPOLL=0). Storing a file twice keeps one."""
    return notify(f"FDSTORE=1\nFDNAME={name}\nFDPOLL=0", [fd], environ)


def remove(name: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Drop every descriptor stored under ``name``."""
    return notify(f"FDSTOREREMOVE=1\nFDNAME={name}", (), environ)


def listen_fds(environ: MutableMapping[str, str] = os.environ) -> list[tuple[str, int]]:
    """The descriptors the service manager passed this process, by name; returns them only once.

    The variables are removed so no child takes them, and each descriptor is made close-on-exec.
    Empty when none were passed or they were meant for another process.
    """
    pid, count = environ.get("LISTEN_PID", ""), environ.get("LISTEN_FDS", "")
    names = environ.get("LISTEN_FDNAMES", "").split(":")
    for variable in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        environ.pop(variable, None)
    if pid != str(os.getpid()) or not count.isdigit():
        return []
    received = []
    for index in range(int(count)):
        fd = LISTEN_FDS_START + index
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFD)
            fcntl.fcntl(fd, fcntl.F_SETFD, flags | fcntl.FD_CLOEXEC)
        except OSError:
            logger.warning("descriptor %d of the %s passed is not open", fd, count)
            continue
        received.append((names[index] if index < len(names) else "unknown", fd))
    return received
