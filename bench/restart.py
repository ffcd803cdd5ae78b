"""`pacer serve` restarted under load, keeping its pinned pool: how soon the next one serves.

    python -m bench.restart [--budget 64GiB] [--store fdstore|shm] [--partitions 4000]
                            [--busy 0.95] [--window-s 2] [--steady-s 15] [--drain-s 30]
                            [--restarts 1]

Starts `pacer serve` cold (``PACER_GPU__KEEP_POOL=true``) as systemd would start it: with a
notify socket and a file-descriptor store, played by `tests.kept_pools.ServiceManager`
(``--store fdstore``, memfd blocks), or without one (``--store shm``, named blocks in
/dev/shm). A short start with a small budget first fills the compiled-kernel caches, as a
host's earlier runs would have. Then it keeps a saturated backlog, SIGTERMs the service once
the GPU is busy, starts the next one as soon as the first has exited (systemd's restart),
``--restarts`` times in a row (each adopting the pool the one before kept), and measures,
from the processes' own status and metrics (over several restarts, the median and range):

- time to ready: launch until ``/readyz`` answers 200, cold and after the restart;
- the pool's pinning time: alone (the same slots pinned by a process doing nothing else, as
  `pacer serve` pins them: `pin_alone`), first of all (on a fresh machine, the first touch
  of its memory) and again once the services are gone (memory touched before, as the cold
  start found it), and within the cold start (``startup.phases_s["prepare.pool"]``, which
  what runs beside it slows); the target is the cold time to ready over the pinning alone
  in touched memory (≤ 1.2);
- time from ready until the GPU is busy again: the first moment its busy ratio over the last
  ``--window-s`` seconds (``pacer_gpu_busy_seconds_total``) reaches ``--busy``;
- the stop: SIGTERM until the process has exited (drain, pool kept);
- host memory every 0.2 s across the run: the most shared memory (Shmem: the pool's blocks)
  and used memory (MemTotal − MemAvailable) seen, against one pool: never two pools at once.

Prints a table; writes ``$OUT/restart.json`` when OUT is set.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from bench.installed import bytecode_env
from gpu.shm.record import sweep
from pacer.cli.table import render
from pacer.client import BlockingClient
from pacer.host.memory import meminfo_bytes
from pacer.settle.detector import parse_size
from tests.kept_pools import ServiceManager

ROOT = Path(__file__).resolve().parents[1]
BUSY = re.compile(r'^pacer_gpu_busy_seconds_total\{gpu="\d+"\} (\S+)$', re.MULTILINE)
GIB = 2**30


@dataclass
class MemoryWatch:
    """/proc/meminfo every 0.2 s on a thread: (t, used, Shmem) in bytes."""

    samples: list[tuple[float, int, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> MemoryWatch:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            fields = meminfo_bytes(Path("/proc/meminfo").read_text())
            used = fields["MemTotal"] - fields["MemAvailable"]
            self.samples.append((time.monotonic(), used, fields.get("Shmem", 0)))
            self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()


class Instance:
    """One `pacer serve`: launched, waited for, scraped, stopped. ``launched_all`` holds each
    one made, for the run to kill what is left should it fail."""

    launched_all: ClassVar[list[Instance]] = []

    def __init__(self, args: argparse.Namespace, workdir: Path, manager: ServiceManager | None,
                 port: int, **env: str) -> None:  # fmt: skip
        self.port = port
        self.client = BlockingClient(f"http://127.0.0.1:{port}")
        self.log_path = Path(args.logs or workdir) / f"serve-{len(Instance.launched_all)}.log"
        self.env = service_env(args, workdir, port, **env)
        argv = [sys.executable, "-m", "pacer", "serve"]
        self.launched = time.monotonic()
        with open(self.log_path, "ab") as log:
            if manager is not None:
                self.proc = manager.launch(argv, self.env, cwd=ROOT, stdout=log,
                                           stderr=subprocess.STDOUT)  # fmt: skip
            else:
                self.proc = subprocess.Popen(argv, env=self.env, cwd=ROOT, stdout=log,
                                             stderr=subprocess.STDOUT, text=True)  # fmt: skip
        self.ready_at: float | None = None
        Instance.launched_all.append(self)

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds from launch to the first 200 from /readyz."""
        deadline = self.launched + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pacer serve exited {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1):
                    self.ready_at = time.monotonic()
                    return self.ready_at - self.launched
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        raise RuntimeError(f"not ready after {timeout_s} s:\n{self.tail()}")

    def busy_s(self) -> float | None:
        try:
            url = f"http://127.0.0.1:{self.port}/metrics"
            with urllib.request.urlopen(url, timeout=2) as response:
                found = BUSY.findall(response.read().decode())
        except (urllib.error.URLError, OSError):
            return None
        return sum(map(float, found)) / len(found) if found else 0.0  # a GPU's mean

    def busy_after_ready(self, target: float, window_s: float, limit_s: float) -> float | None:
        """Seconds from ready until the busy ratio over the last ``window_s`` reaches
        ``target``; None within ``limit_s``."""
        assert self.ready_at is not None
        samples: list[tuple[float, float]] = []
        while time.monotonic() - self.ready_at < limit_s:
            busy = self.busy_s()
            now = time.monotonic()
            if busy is not None:
                samples.append((now, busy))
                older = [(t, b) for t, b in samples if t <= now - window_s]
                if older:
                    t0, b0 = older[-1]
                    if (busy - b0) / (now - t0) >= target:
                        return now - self.ready_at
            time.sleep(0.1)
        return None

    def busy_over(self, seconds: float) -> float:
        first, started = self.busy_s() or 0.0, time.monotonic()
        time.sleep(seconds)
        return ((self.busy_s() or 0.0) - first) / (time.monotonic() - started)

    def stop(self, signum: int = signal.SIGTERM, timeout_s: float = 300) -> float:
        """Seconds from the signal until the process has exited (0 expected)."""
        self.signalled_at = sent = time.monotonic()
        self.proc.send_signal(signum)
        status = self.proc.wait(timeout_s)
        if status != 0:
            raise RuntimeError(f"pacer serve exited {status}:\n{self.tail()}")
        return time.monotonic() - sent

    def tail(self) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-40:])

    def startup_lines(self) -> list[str]:
        """The log's lines on where the pool came from and how long the start took."""
        marks = ("start-up:", "adopting", "pinned pool ready", " ready in ")
        lines = self.log_path.read_text(errors="replace").splitlines()
        return [line for line in lines if any(mark in line for mark in marks)]


def service_env(args: argparse.Namespace, workdir: Path, port: int, **env: str) -> dict[str, str]:
    """The environment of a `pacer serve` of this bench: its journal in ``workdir``, its
    bytecode as an installed pacer's (`bench.installed`)."""
    return {
        **bytecode_env(),
        "PACER_JOURNAL__PATH": str(workdir / "journal.sqlite"),
        "PACER_API__PORT": str(port),
        "PACER_MEMORY__BUDGET_BYTES": args.budget,
        "PACER_SHUTDOWN__DRAIN_S": str(args.drain_s),
        "PACER_GPU__KEEP_POOL": "true",
        "PACER_WORKLOAD": args.workload,
        **env,
    }


def pin_alone(threads: int | None = None) -> dict[str, Any]:
    """Seconds to pin the pool `pacer serve` would with these settings on this host (the
    plan's slots of the workload's partitions), as it pins it (shared blocks, populated and
    registered on the same threads: ``threads``, or as many as a service uses) but with
    nothing else running; the CUDA context is made first and not counted. Freed after. With
    the pinning threads' seconds in each part (`gpu.pool.allocators.PinSeconds`)."""
    import cupy

    from gpu.pool import allocators
    from gpu.pool.pinned import PinnedPool
    from gpu.shm.handover import Handover
    from gpu.workload import GpuNttWorkload
    from pacer.config import load_settings
    from pacer.host.memory import HOST_FILES
    from pacer.plan import resolve
    from pacer.service.resources import read_host
    from pacer.workload import load_workload

    settings = load_settings()
    workload = load_workload(settings)
    if not isinstance(workload, GpuNttWorkload):
        raise SystemExit(f"{workload.name} does not prove on GPUs: no pool to pin")
    slots = resolve(settings, workload, read_host(HOST_FILES)).pool_slots

    cupy.cuda.Device(0).synchronize()
    n = 1 << workload.log_n
    handover = Handover.for_service(False, slots, settings.gpu.shm_dir)
    allocator = allocators.SharedHostAllocator(True, handover, threads)
    began = time.perf_counter()
    pool = PinnedPool.build(slots, [(n,)] * 3, dtype=workload.field.storage, backend=allocator)
    seconds = time.perf_counter() - began
    pool.close()
    return {
        "s": seconds,
        "threads": allocator.threads,
        "parts": allocator.pin_seconds.words(pool.slot_bytes),
    }


def pinning_alone(args: argparse.Namespace, workdir: Path, threads: int | None = None,
                  whole: bool = False) -> Any:  # fmt: skip
    """`pin_alone` in a process of its own, with a service's environment: its seconds (or,
    ``whole``, all it says)."""
    code = (
        f"import json; from bench.restart import pin_alone; print(json.dumps(pin_alone({threads})))"
    )
    pinned = subprocess.run([sys.executable, "-c", code], cwd=ROOT, text=True,
                            env=service_env(args, workdir, 0, PACER_GPU__KEEP_POOL="false"),
                            capture_output=True, check=True,
                            timeout=args.ready_timeout_s)  # fmt: skip
    said = json.loads(pinned.stdout.splitlines()[-1])
    return said if whole else float(said["s"])


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def keep_backlog(client: BlockingClient, partitions: int) -> None:
    per_job = 500
    for _ in range(max(1, partitions // per_job)):
        client.submit(per_job)


def restarted(args: argparse.Namespace, workdir: Path, manager: ServiceManager | None,
              previous: Instance) -> dict[str, Any]:  # fmt: skip
    """The next `pacer serve` after ``previous`` exited: launched, measured, stopped (its
    pool kept for the one after)."""
    after = Instance(args, workdir, manager, free_port())
    one: dict[str, Any] = {"ready_s": after.wait_ready(args.ready_timeout_s)}
    assert after.ready_at is not None
    one["sigterm_to_ready_s"] = after.ready_at - previous.signalled_at
    status = after.client.status()
    one["startup"] = status["startup"]
    one["origin"] = status["pool"]["origin"]
    one["busy_after_ready_s"] = after.busy_after_ready(args.busy, args.window_s,
                                                       args.busy_limit_s)  # fmt: skip
    one["busy_ratio"] = after.busy_over(args.steady_s)
    one["allocations_after_warmup"] = after.client.status()["pool"]["allocations_after_warmup"]
    one["log"] = after.startup_lines()
    one["stop_s"] = after.stop()
    return one


def run(args: argparse.Namespace) -> dict[str, Any]:
    sweep(drop_kept=True)
    out: dict[str, Any] = {"budget": args.budget, "store": args.store}
    with tempfile.TemporaryDirectory(prefix="pacer-restart-") as tmp:
        workdir = Path(tmp)
        manager = ServiceManager(workdir) if args.store == "fdstore" else None
        # First, on a fresh machine the first touch of its memory: later ones find it touched.
        out["pin_alone_first_s"] = pinning_alone(args, workdir)
        memory = MemoryWatch().start()
        try:
            # Compiled-kernel caches filled by a small start, as a host's earlier runs would;
            # its pool not kept, nor in shared memory (threads), so none is left to adopt.
            warm = Instance(args, workdir, None, free_port(), PACER_GPU__KEEP_POOL="false",
                            PACER_MEMORY__BUDGET_BYTES=args.warm_budget,
                            PACER_SYNTHESIS__EXECUTOR="threads")  # fmt: skip
            out["warm_ready_s"] = warm.wait_ready(args.ready_timeout_s)
            warm.stop()
            sweep(drop_kept=True)
            baseline = memory.samples[-1]

            cold = Instance(args, workdir, manager, free_port())
            out["cold_ready_s"] = cold.wait_ready(args.ready_timeout_s)
            status = cold.client.status()
            out["cold_startup"] = status["startup"]
            out["pool_bytes"] = status["pool"]["total_bytes"]
            out["pool_slots"] = status["pool"]["slots_total"]
            keep_backlog(cold.client, args.partitions)
            out["cold_busy_after_ready_s"] = cold.busy_after_ready(
                args.busy, args.window_s, args.busy_limit_s
            )
            out["before_busy_ratio"] = cold.busy_over(args.steady_s)
            out["cold_log"] = cold.startup_lines()
            out["stop_s"] = cold.stop()

            previous, out["restarts"] = cold, []
            for _ in range(args.restarts):  # each adopts the pool the one before kept
                out["restarts"].append(restarted(args, workdir, manager, previous))
                previous = Instance.launched_all[-1]
        finally:
            memory.stop()
            for instance in Instance.launched_all:
                if instance.proc.poll() is None:
                    instance.proc.kill()
                    instance.proc.wait()
            if manager is not None:
                manager.close()
            sweep(drop_kept=True)
        out["baseline_used_bytes"], out["baseline_shmem_bytes"] = baseline[1:]
        out["max_used_bytes"] = max(used for _, used, _ in memory.samples)
        out["max_shmem_bytes"] = max(shmem for _, _, shmem in memory.samples)
        # The services gone and their pools swept: the same pool pinned with nothing beside,
        # in memory the cold start found touched as well.
        out["pin_alone_s"] = pinning_alone(args, workdir)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("--budget", default="64GiB")
    parser.add_argument("--store", choices=["fdstore", "shm"], default="fdstore")
    parser.add_argument("--partitions", type=int, default=4000)
    parser.add_argument("--busy", type=float, default=0.95)
    parser.add_argument("--window-s", type=float, default=2.0)
    parser.add_argument("--steady-s", type=float, default=15.0)
    parser.add_argument("--busy-limit-s", type=float, default=60.0)
    parser.add_argument("--drain-s", type=float, default=30.0)
    parser.add_argument(
        "--restarts",
        type=int,
        default=1,
        help="restarts in a row, each adopting the pool the one before kept",
    )
    parser.add_argument("--ready-timeout-s", type=float, default=300.0)
    parser.add_argument("--warm-budget", default="8GiB", help="the cache-filling start's")
    parser.add_argument("--logs", help="where the services' logs go (default: a temporary one)")
    parser.add_argument(
        "--workload", default="ntt", help="PACER_WORKLOAD (another only to try the bench out)"
    )
    args = parser.parse_args()
    parse_size(args.budget)
    result = run(args)
    report(result, args)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "restart.json").write_text(json.dumps(result, indent=1))
    return 0


def median_range(values: list[float], digits: int = 1) -> str:
    """One value as it is; several as their median and range.

    >>> median_range([7.4, 8.2, 7.6])
    '7.6 (7.4 to 8.2)'
    """
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:.{digits}f} ({low:.{digits}f} to {high:.{digits}f})"


def report(result: dict[str, Any], args: argparse.Namespace) -> None:
    """Print the run's table (and each start's phases)."""
    pool = result["pool_bytes"]
    pinning = result["pin_alone_s"]
    within = result["cold_startup"]["phases_s"].get("prepare.pool", 0.0)
    shared = result["max_shmem_bytes"] - result["baseline_shmem_bytes"]

    def seconds(value: float | None) -> str:
        return "never" if value is None else f"{value:.1f}"

    restarts = result["restarts"]

    def spread(key: str, digits: int = 1) -> str:
        """The restarts' values of ``key``: one, or the median and the range."""
        values = [one[key] for one in restarts]
        if any(value is None for value in values):
            return ", ".join("never" if v is None else f"{v:.{digits}f}" for v in values)
        return median_range(values, digits)

    cold_busy = result["cold_busy_after_ready_s"]
    to_busy = [None if one["busy_after_ready_s"] is None
               else one["ready_s"] + one["busy_after_ready_s"] for one in restarts]  # fmt: skip
    for one, value in zip(restarts, to_busy, strict=True):
        one["launch_to_busy_s"] = value
    over = f"over {len(restarts)} restarts: median (range)" if len(restarts) > 1 else ""
    rows = [
        ["the pool's pinning, alone", f"{pinning:.1f} s",
         f"{pool / GIB / pinning:.1f} GiB/s; first of the run {result['pin_alone_first_s']:.1f} s; "
         f"within the cold start {within:.1f} s", ""],
        ["cold start: ready", f"{result['cold_ready_s']:.1f} s",
         f"{result['cold_ready_s'] / pinning:.2f} × pinning alone", "≤ 1.2 × pinning"],
        ["cold start: GPU busy ≥ target after ready", f"{seconds(cold_busy)} s",
         "launch → busy " + seconds(None if cold_busy is None
                                    else result["cold_ready_s"] + cold_busy) + " s", ""],
        ["busy ratio before the restart", f"{result['before_busy_ratio']:.3f}",
         f"over {args.steady_s:g} s", ""],
        ["SIGTERM → exited (drain, pool kept)", f"{result['stop_s']:.1f} s", "", ""],
        ["restart: ready after launch", f"{spread('ready_s')} s",
         f"pool {restarts[0]['origin']} {over}".rstrip(), "≤ 15 s"],
        ["restart: ready after SIGTERM", f"{spread('sigterm_to_ready_s')} s", "", ""],
        ["restart: GPU busy ≥ target after ready", f"{spread('busy_after_ready_s')} s",
         f"launch → busy {spread('launch_to_busy_s')} s", "≤ 10 s"],
        ["busy ratio after the restart", spread("busy_ratio", 3),
         f"over {args.steady_s:g} s once busy", ""],
        ["most shared memory held, over the baseline", f"{shared / GIB:.1f} GiB",
         f"pool {pool / GIB:.1f} GiB: {shared / pool:.2f} pools", "< 2 pools"],
        ["most used memory", f"{result['max_used_bytes'] / GIB:.1f} GiB",
         f"baseline {result['baseline_used_bytes'] / GIB:.1f} GiB", ""],
        ["pinned allocations after warm-up",
         ", ".join(str(one["allocations_after_warmup"]) for one in restarts), "", "0"],
    ]  # fmt: skip
    print(f"pool {result['pool_slots']} slots, {pool / GIB:.1f} GiB, kept in {args.store}")
    print("cold_startup", json.dumps(result["cold_startup"]))
    for number, one in enumerate(restarts, 1):
        print(f"restart_{number}_startup", json.dumps(one["startup"]))
    print(render(["measure", "value", "detail", "target"], rows))


if __name__ == "__main__":
    sys.exit(main())
