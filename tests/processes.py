"""Process trees read from /proc, for the tests that kill a parent and look at what is left."""

from __future__ import annotations

import os
from pathlib import Path

from gpu.shm.blocks import BLOCK_PREFIX
from pacer.settle.held import HeldBlockScanner
from pacer.settle.sources import _read_stat
from tests.waits import wait_until

PROC = Path("/proc")


def start_time(pid: int) -> int | None:
    """Clock ticks after boot at which ``pid`` started (None once it is gone): tells a process
    from a later one given the same PID."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
        return int(text[text.rindex(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def parent_of(pid: int) -> int | None:
    stat = _read_stat(PROC / str(pid) / "stat")
    return None if stat is None else stat[2]


def state_of(pid: int) -> str | None:
    """``pid``'s state as the kernel shows it (R, S, T: stopped, Z: a zombie); None once gone."""
    stat = _read_stat(PROC / str(pid) / "stat")
    return None if stat is None else stat[1]


def descendants(pid: int) -> dict[int, tuple[str, int]]:
    """Every process below ``pid`` now: PID → (kernel name, start time)."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = _read_stat(entry / "stat")
            if stat is not None:
                children.setdefault(stat[2], []).append(int(entry.name))
                names[int(entry.name)] = stat[0]
    found: dict[int, tuple[str, int]] = {}
    stack = list(children.get(pid, []))
    while stack:
        child = stack.pop()
        started = start_time(child)
        if started is not None:
            found[child] = (names[child], started)
        stack.extend(children.get(child, []))
    return found


def running(processes: dict[int, tuple[str, int]]) -> dict[int, str]:
    """Those of ``processes`` still running: the same process (start time) and not a zombie,
    which holds no memory any more. PID → state and name."""
    left = {}
    for pid, (name, started) in processes.items():
        stat = _read_stat(PROC / str(pid) / "stat")
        if stat is not None and stat[1] not in "ZX" and start_time(pid) == started:
            left[pid] = f"{name} ({stat[1]})"
    return left


def mapping_blocks_of(owner: int) -> list[int]:
    """PIDs of the processes (other than ``owner``) that map a pool block ``owner`` made in
    the test's directory, which PACER_GPU__SHM_DIR names to the test and what it starts."""
    directory = os.environ["PACER_GPU__SHM_DIR"]
    held = HeldBlockScanner(prefix=f"{BLOCK_PREFIX}{owner}-", directory=directory)()
    return [holder.pid for holder in held.holders if holder.pid != owner]


def leftovers(
    processes: dict[int, tuple[str, int]], owner: int, environment: str | None = None
) -> tuple[dict[int, str], list[int]]:
    """What is left of ``owner`` (a service killed): those of ``processes`` still running, and
    every process with ``environment`` (``NAME=value``, when given), by PID; the PIDs mapping
    its pool blocks."""
    left, mapping = running(processes), mapping_blocks_of(owner)
    if environment is not None:
        left |= {pid: environment for pid in with_environment(environment)}
    return left, mapping


def wait_until_gone(
    processes: dict[int, tuple[str, int]],
    owner: int,
    environment: str | None = None,
    timeout_s: float = 5.0,
    what: str | None = None,
) -> None:
    """Wait until nothing is left of ``owner`` (`leftovers` is empty), for at most
    ``timeout_s``; an AssertionError naming ``what`` and what is left after."""
    what = what or f"what process {owner} started to end and nothing to map its pool blocks"
    wait_until(lambda: leftovers(processes, owner, environment), what,
               done=lambda left: left == ({}, []), timeout_s=timeout_s)  # fmt: skip


def with_environment(entry: str) -> list[int]:
    """PIDs of the running processes (zombies hold nothing) whose environment has ``entry``
    (``NAME=value``): a service's and everything it started, wherever they were reparented."""
    wanted = entry.encode()
    found = []
    for entry_dir in PROC.iterdir():
        if not entry_dir.name.isdigit():
            continue
        try:
            environment = (entry_dir / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        stat = _read_stat(entry_dir / "stat")
        if wanted in environment and stat is not None and stat[1] not in "ZX":
            found.append(int(entry_dir.name))
    return found
