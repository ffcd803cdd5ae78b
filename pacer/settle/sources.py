"""Where memory samples come from: /proc/meminfo, a cgroup's memory files, NVML, recorded CSV;
and old processes."""

from __future__ import annotations

import csv
import dataclasses
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpu.shm.blocks import SHM_DIR
from pacer.host.cgroup import CGROUP_ROOT, read_cgroup, read_memory_stat
from pacer.host.memory import MEMINFO, bytes_text, meminfo_bytes
from pacer.settle.detector import COMM_LEN


@dataclass(frozen=True)
class Sample:
    """Used memory now: the host's bytes (or a cgroup's), and GPU bytes (all devices) where
    NVML is there; of the used bytes, ``kept_bytes`` are a pool kept on purpose for the next
    pacer, and ``shmem_bytes`` (where known) are shared memory, which a kept pool is."""

    used_bytes: int
    gpu_used_bytes: int | None = None
    kept_bytes: int = 0
    shmem_bytes: int | None = None


@dataclass(frozen=True)
class TimedSample:
    """A sample ``t_s`` seconds after the first one."""

    t_s: float
    used_bytes: int
    gpu_used_bytes: int | None = None
    kept_bytes: int = 0

    @property
    def judged_bytes(self) -> int:
        """Used memory less the pool kept for the next pacer: memory held on purpose is not
        memory still draining, and not memory given back either."""
        return max(0, self.used_bytes - self.kept_bytes)

    def as_dict(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {"t_s": round(self.t_s, 3), "used_bytes": self.used_bytes}
        if self.gpu_used_bytes is not None:
            out["gpu_used_bytes"] = self.gpu_used_bytes
        if self.kept_bytes:
            out["kept_bytes"] = self.kept_bytes
        return out


class Sampler(Protocol):
    def sample(self) -> Sample: ...


class SamplingError(Exception):
    """Used memory could not be read."""


def used_bytes_from_meminfo(text: str) -> int:
    """MemTotal − MemAvailable from the text of /proc/meminfo, in bytes."""
    return _used_bytes(meminfo_bytes(text))


def _used_bytes(fields: dict[str, int]) -> int:
    missing = [name for name in ("MemTotal", "MemAvailable") if name not in fields]
    if missing:
        raise ValueError(f"no {' or '.join(missing)} line")
    return fields["MemTotal"] - fields["MemAvailable"]


class NvmlMemory:
    """Memory used on all GPUs, read through NVML (``pynvml``, from nvidia-ml-py)."""

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self._nvml = nvml
        self._handles = handles

    @classmethod
    def open(cls) -> NvmlMemory | None:
        """None, silently, when pynvml is not installed, NVML does not load or no GPU is there."""
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception:
            return None
        try:
            count = pynvml.nvmlDeviceGetCount()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except pynvml.NVMLError:
            handles = []
        if not handles:
            pynvml.nvmlShutdown()
            return None
        return cls(pynvml, handles)

    def used_bytes(self) -> int | None:
        """None when a device cannot be read this time."""
        try:
            return sum(int(self._nvml.nvmlDeviceGetMemoryInfo(h).used) for h in self._handles)
        except self._nvml.NVMLError:
            return None

    def close(self) -> None:
        self._nvml.nvmlShutdown()


class MeminfoSampler:
    """The host's used memory from /proc/meminfo (its Shmem as shared memory), plus GPU used
    memory when ``gpu`` is given."""

    def __init__(self, path: Path = MEMINFO, gpu: NvmlMemory | None = None) -> None:
        self.path = path
        self.gpu = gpu

    def sample(self) -> Sample:
        try:
            fields = meminfo_bytes(self.path.read_text())
            used = _used_bytes(fields)
        except (OSError, ValueError) as exc:
            raise SamplingError(f"cannot read used memory from {self.path}: {exc}") from exc
        gpu = None if self.gpu is None else self.gpu.used_bytes()
        return Sample(used, gpu, shmem_bytes=fields.get("Shmem"))


class CgroupSampler:
    """A cgroup's memory.current as used memory (its memory.stat ``shmem`` as shared memory),
    plus GPU used memory when ``gpu`` is given. ``cgroup`` is its path as /proc/self/cgroup
    names it, under the cgroup filesystem ``root``."""

    def __init__(
        self, cgroup: str, root: Path = CGROUP_ROOT, gpu: NvmlMemory | None = None
    ) -> None:
        self.cgroup = cgroup
        self.root = root
        self.gpu = gpu

    def sample(self) -> Sample:
        limit = read_cgroup(self.cgroup, self.root)
        if limit is None:
            raise SamplingError(
                f"cannot read memory.current of cgroup {self.cgroup} under {self.root}, or its "
                'memory.max is "max" now: the limit it was judged against is gone'
            )
        shmem = read_memory_stat(self.cgroup, self.root).get("shmem")
        gpu = None if self.gpu is None else self.gpu.used_bytes()
        return Sample(limit.current_bytes, gpu, shmem_bytes=shmem)


class StaleBlocksRemoved:
    """``sampler``, after removing the pinned-pool blocks a dead pacer left in ``directory``
    (a tmpfs), with the pools kept for the next pacer counted apart (`Sample.kept_bytes`).

    Shared memory outlives a process killed with SIGKILL, so a killed service's pool (tens of
    GiB) would hold used memory up until the next service starts and removes it. Only blocks
    whose process is gone and that no owner record keeps, and records whose blocks are gone,
    are touched (`gpu.shm.record.sweep`); with ``drop_kept``, kept pools go too. ``report``
    hears what went, and each kept pool once.

    A kept pool's pages are charged to the cgroup that first wrote them: a cgroup sampled
    after a restart (a new pod's, a unit's made anew) may hold none of them. So the kept bytes
    counted in a sample are at most its shared memory (`Sample.shmem_bytes`); ``report`` hears
    once of the rest, which is not in the memory judged.
    """

    def __init__(
        self,
        sampler: Sampler,
        report: Callable[[str], None],
        drop_kept: bool = False,
        meminfo: Path = MEMINFO,
        directory: str = SHM_DIR,
    ) -> None:
        self.sampler = sampler
        self.report = report
        self.drop_kept = drop_kept
        self.meminfo = meminfo
        self.directory = directory
        self._told: set[tuple[str, int]] = set()
        self._told_outside = False

    def sample(self) -> Sample:
        from gpu.shm.record import sweep

        done = sweep(self.directory, self._shmem_bytes(), self.drop_kept)
        if done.removed_blocks:
            self.report(
                f"removed {done.removed_blocks} pinned-pool blocks "
                f"({done.removed_bytes / 2**30:.2f} GiB) that a dead pacer left in "
                f"{self.directory}"
            )
        for path, why in done.stale_records:
            self.report(f"removed the pool record {path}: {why}")
        for pool in done.kept:
            if (pool.path, pool.record.generation) not in self._told:
                self._told.add((pool.path, pool.record.generation))
                self.report(pool.words())
        sample = self.sampler.sample()
        kept = done.kept_bytes
        if sample.shmem_bytes is not None:
            kept = min(kept, sample.shmem_bytes)
        if kept < done.kept_bytes and not self._told_outside:
            self._told_outside = True
            self.report(
                f"{bytes_text(done.kept_bytes - kept)} of the pools kept for the next pacer is "
                "not in the memory judged: charged to the cgroup that first wrote it"
            )
        return dataclasses.replace(sample, kept_bytes=kept)

    def _shmem_bytes(self) -> int | None:
        """The host's shared memory (Shmem), which holds pools kept in a descriptor store."""
        try:
            return meminfo_bytes(self.meminfo.read_text()).get("Shmem")
        except OSError:
            return None


# --- processes ------------------------------------------------------------------------------

STATES = {"R": "running", "S": "sleeping", "D": "disk sleep", "Z": "zombie", "T": "stopped"}


@dataclass(frozen=True)
class ProcessInfo:
    """A process that blocks settling; ``state`` is the letter of /proc/PID/stat."""

    pid: int
    name: str
    state: str

    def __str__(self) -> str:
        return f"process {self.name} (pid {self.pid}, {STATES.get(self.state, self.state)})"


ProcessCheck = Callable[[], list[ProcessInfo]]


def no_processes() -> list[ProcessInfo]:
    return []


def _read_stat(path: Path) -> tuple[str, str, int] | None:
    """(name, state, ppid) from a /proc/PID/stat file; None once the process is gone."""
    try:
        text = path.read_text(errors="replace")
        name = text[text.index("(") + 1 : text.rindex(")")]
        state, ppid = text[text.rindex(")") + 2 :].split()[:2]
        return name, state, int(ppid)
    except (OSError, ValueError):
        return None


def self_and_ancestors(proc: Path = Path("/proc")) -> set[int]:
    """This process's PID and its ancestors', which ``pacer settle`` never waits for."""
    pids: set[int] = set()
    pid = os.getpid()
    while pid > 0 and pid not in pids:
        pids.add(pid)
        stat = _read_stat(proc / str(pid) / "stat")
        pid = 0 if stat is None else stat[2]
    return pids


SERVE = b"serve"  # the subcommand of a pacer service, a word of its command line


class ProcessScanner:
    """pacer services: processes whose kernel name (``comm``: /proc/PID/stat, what ``ps -o comm``
    shows) is ``name`` and whose command line runs ``serve``, or zombies of that name (they have
    no command line left, hence the kernel name). Both names are cut to 15 characters as the
    kernel cuts them. Another program of that name, or a pacer client (``pacer status``), is
    not waited for; nor this process and its ancestors, so that ``pacer settle`` does not wait
    for itself.
    """

    def __init__(self, name: str, proc: Path = Path("/proc")) -> None:
        if not name:
            raise ValueError("process name must not be empty")
        self.name = name[:COMM_LEN]
        self.proc = proc

    def __call__(self) -> list[ProcessInfo]:
        skip = self_and_ancestors(self.proc)
        found = []
        for entry in self.proc.iterdir():
            if not entry.name.isdigit() or int(entry.name) in skip:
                continue
            stat = _read_stat(entry / "stat")
            if stat is not None and stat[0] == self.name and _serves(entry, stat[1]):
                found.append(ProcessInfo(int(entry.name), stat[0], stat[1]))
        return sorted(found, key=lambda p: p.pid)


def _serves(entry: Path, state: str) -> bool:
    """Whether the process at ``entry`` (/proc/PID) runs ``serve``; a zombie is taken to."""
    if state == "Z":
        return True
    try:
        return SERVE in (entry / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


class ReplayError(Exception):
    """A replay file that cannot be read; the message names the file and line."""


def read_replay(path: Path) -> list[TimedSample]:
    """Rows of a CSV with a header naming ``t_s`` and ``used_bytes`` (other columns ignored);
    times become seconds after the first row and must increase."""
    try:
        with path.open(newline="") as file:
            return _parse_replay(csv.reader(file), path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ReplayError(f"cannot read {path}: {exc}") from None


def _parse_replay(reader: Any, path: Path) -> list[TimedSample]:
    def fail(problem: str) -> ReplayError:
        return ReplayError(f"{path} line {max(reader.line_num, 1)}: {problem}")

    header = [name.strip() for name in next(reader, [])]
    missing = [name for name in ("t_s", "used_bytes") if name not in header]
    if missing:
        raise fail(f"the header must name columns t_s and used_bytes; missing {', '.join(missing)}")
    t_col, used_col = header.index("t_s"), header.index("used_bytes")
    rows: list[TimedSample] = []
    first_t_s = 0.0
    for row in reader:
        if not row:
            continue
        if len(row) <= max(t_col, used_col):
            raise fail(f"{len(row)} fields, the header has {len(header)}")
        try:
            t_s = float(row[t_col])
        except ValueError:
            raise fail(f"t_s {row[t_col]!r} is not a number of seconds") from None
        if not math.isfinite(t_s):
            raise fail(f"t_s {row[t_col]!r} is not a finite number")
        text = row[used_col].strip()
        if not text.isdigit():
            raise fail(f"used_bytes {row[used_col]!r} is not a whole number of bytes >= 0")
        if not rows:
            first_t_s = t_s
        t_s -= first_t_s
        if rows and t_s <= rows[-1].t_s:
            raise fail("t_s must increase from one row to the next")
        rows.append(TimedSample(t_s, int(text)))
    if not rows:
        raise fail("no samples after the header")
    return rows
