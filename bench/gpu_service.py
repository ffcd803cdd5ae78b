"""`pacer serve` on a GPU host, measured by its own metrics and cross-checked against NVML.

    python -m bench.gpu_service [--seconds 120] [--warmup 30]
                                [--policies pi,unpaced,cuzk,cuzk-default]
                                [--log-n 27] [--workers-per-device 2] [--devices all]
                                [--chunk-log2 20] [--executor threads|processes]
                                [--field goldilocks|babybear] [--cpu-backend numba|numpy]

For each policy in turn, starts the service in-process with the ntt workload on the GPUs
(synthesis on this host's cores into the pinned pool), keeps a backlog of jobs waiting, lets it
warm up, then measures for ``--seconds``: partitions/s; per GPU the busy ratio (growth of
``pacer_gpu_busy_seconds_total`` over the window) and the idle-gap p99 (the gaps the pipeline
reports to ``pacer_gpu_idle_gap_seconds``, those ending inside the window); NVML utilization
sampled every 100 ms during the window; mean phase times from ``pacer_gpu_phase_seconds``; the
pool's allocations after warm-up (must stay 0), waits and fallbacks over the whole run;
the cores the service process and its synthesis processes used during the window; under pi
the controller's synthesis cap against the GPUs' rate at the window's end. Prints
one table with a row per policy and GPU; writes ``$OUT/gpu_service.json`` when OUT is set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from bench.service import quantile
from bench.usage import doc_parser
from gpu.cuda.ntt import GPU_PHASES
from gpu.workload import GpuNttWorkload
from pacer.cli.table import render
from pacer.config import Settings
from pacer.pipeline import Outcome
from pacer.pipeline.attempts import Call
from pacer.server import Server
from pacer.service.lifecycle import Service


class Gaps:
    """Wraps the service's observer to keep every idle gap per GPU, with when it ended."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gaps: dict[int, list[tuple[float, float]]] = {}

    def synthesized(self, seconds: float, wait_s: float) -> None:
        self.inner.synthesized(seconds, wait_s)

    def proved(self, gpu: int, gpu_s: float, phases_s: dict[str, float]) -> None:
        self.inner.proved(gpu, gpu_s, phases_s)

    def idle_gap(self, gpu: int, seconds: float) -> None:
        self.gaps.setdefault(gpu, []).append((time.perf_counter(), seconds))
        self.inner.idle_gap(gpu, seconds)

    def finished(self, outcome: Outcome) -> None:
        self.inner.finished(outcome)

    def hung_call(self, call: Call) -> None:
        self.inner.hung_call(call)

    def within(self, gpu: int, start: float, end: float) -> list[float]:
        return [s for at, s in self.gaps.get(gpu, []) if start <= at <= end]


def cpu_seconds() -> tuple[float, float]:
    """CPU time so far of this process (all its threads) and of its live descendants (the
    synthesis processes), from /proc: where the cores go while a window runs."""
    ticks = os.sysconf("SC_CLK_TCK")
    table: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        table[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
    own = table.get(os.getpid(), (0, 0.0))[1]
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    below, frontier = 0.0, list(children.get(os.getpid(), []))
    while frontier:
        pid = frontier.pop()
        below += table[pid][1]
        frontier += children.get(pid, [])
    return own, below


def nvml_sampler(stop: threading.Event, samples: dict[int, list[int]]) -> None:
    try:
        import pynvml
    except ImportError:
        return
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    while not stop.wait(0.1):
        for i, handle in enumerate(handles):
            samples.setdefault(i, []).append(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    pynvml.nvmlShutdown()


def phase_means_ms(registry: CollectorRegistry, gpu: int) -> dict[str, float]:
    means = {}
    for phase in GPU_PHASES:
        labels = {"gpu": str(gpu), "phase": phase}
        total = registry.get_sample_value("pacer_gpu_phase_seconds_sum", labels) or 0.0
        count = registry.get_sample_value("pacer_gpu_phase_seconds_count", labels) or 0.0
        means[phase] = 1000 * total / count if count else 0.0
    return means


async def keep_backlog(server: Server, partitions: int) -> None:
    if server.service.pipeline.backlog < partitions * 2:
        await server.service.submit(partitions, {}, 0)


async def run_policy(args: argparse.Namespace, policy: str, results: list[dict[str, Any]]) -> None:
    """Runs and measures one policy, appending its result to ``results`` and reporting it (the
    row on stderr, the JSON so far under $OUT) before the service drains and closes: a run cut
    short during shutdown keeps its numbers."""
    tmp = Path(tempfile.mkdtemp())
    settings = Settings(
        ntt={"log_n": args.log_n}
        | ({} if args.field is None else {"field": args.field})
        | ({} if args.cpu_backend is None else {"cpu_backend": args.cpu_backend}),
        gpu={"devices": args.devices}
        | (
            {}
            if args.workers_per_device is None
            else {"workers_per_device": args.workers_per_device}
        ),
        synthesis={"threads_per_synthesis": 1}
        | ({} if args.executor is None else {"executor": args.executor}),
        controller={"policy": policy},
        verify_every=args.verify_every,
        journal={"path": tmp / "journal.sqlite"},
        api={"port": 0},
    )
    registry = CollectorRegistry()
    server = Server(Service.build(settings, registry))
    await server.service.open()  # the workload loaded and the journal open: start_s is the start's
    gaps = Gaps(server.service.pipeline.observer)  # the metrics, and progress for readiness
    server.service.pipeline.observer = gaps
    began = time.perf_counter()
    await server.start()
    start_s = time.perf_counter() - began
    p = server.service.pipeline
    pool = (
        server.service.workload.pool
        if isinstance(server.service.workload, GpuNttWorkload)
        else None
    )
    warm_allocations = pool.allocations if pool is not None else 0
    await keep_backlog(server, args.partitions)
    print(f"[{policy}] ready in {start_s:.1f} s; warming up {args.warmup:.0f} s", file=sys.stderr)
    warm_until = time.perf_counter() + args.warmup
    while time.perf_counter() < warm_until:
        await asyncio.sleep(1.0)
        await keep_backlog(server, args.partitions)
    stop = threading.Event()
    nvml: dict[int, list[int]] = {}
    sampler = threading.Thread(target=nvml_sampler, args=(stop, nvml), daemon=True)
    started = time.perf_counter()
    proved_at_start = p.proved
    busy_at_start = {g: p.busy_seconds(g) for g in p.gpus}
    sampler.start()
    cpu_at_start = cpu_seconds()
    next_report = started
    inflight_gib: list[float] = []
    while (now := time.perf_counter()) - started < args.seconds:
        await asyncio.sleep(1.0)
        inflight_gib.append(p.inflight_bytes / 2**30)
        await keep_backlog(server, args.partitions)
        if now >= next_report:
            next_report += 10
            print(f"[{policy}] {now - started:4.0f} s: {p.proved - proved_at_start} proved, "
                  f"{p.ready} ready, {p.synthesizing} synthesizing", file=sys.stderr)  # fmt: skip
    ended = time.perf_counter()
    # Read first: scanning /proc for CPU time takes up to a second beside the busy proving
    # threads, which counted as busy time beyond the window (ratios of 1.004 to 1.02).
    busy_at_end = {g: p.busy_seconds(g) for g in p.gpus}
    proved_at_end = p.proved
    elapsed = ended - started
    cpu_at_end = cpu_seconds()
    stop.set()
    sampler.join(2)
    per_gpu = {}
    for g in p.gpus:
        window_gaps = gaps.within(g, started, ended)
        per_gpu[g] = {
            "workers": p.workers_on(g),
            "busy_ratio": (busy_at_end[g] - busy_at_start[g]) / elapsed,
            "idle_gap_p99_ms": quantile(window_gaps, 0.99) * 1000 if window_gaps else 0.0,
            "idle_gaps": len(window_gaps),
            "nvml_util_mean": (sum(nvml[g]) / len(nvml[g])) if nvml.get(g) else None,
            "phase_ms": phase_means_ms(registry, g),
        }
    synthesis_cap = registry.get_sample_value("pacer_controller_synthesis_cap")  # pi only
    ff_term = registry.get_sample_value("pacer_controller_ff_term")
    synthesis_sum = registry.get_sample_value("pacer_synthesis_seconds_sum") or 0.0
    synthesis_count = registry.get_sample_value("pacer_synthesis_seconds_count") or 0.0
    result = {
        "policy": policy,
        "log_n": getattr(server.service.workload, "log_n", None),
        "field": getattr(getattr(server.service.workload, "field", None), "name", None),
        "seconds": elapsed,
        "warmup_s": args.warmup,
        "start_s": start_s,
        "partitions_per_s": (proved_at_end - proved_at_start) / elapsed,
        "synthesis_concurrency": server.service.plan.caps.synthesis_concurrency,
        "executor": settings.synthesis.executor,
        "cpu_backend": getattr(server.service.workload, "kernel", None),
        "synthesis_mean_s": synthesis_sum / synthesis_count if synthesis_count else None,
        "synthesis_cap_per_s": synthesis_cap,
        "gpu_rate_per_s": 1 / ff_term if ff_term else None,
        "inflight_gib_mean": sum(inflight_gib) / len(inflight_gib) if inflight_gib else 0.0,
        "inflight_gib_max": max(inflight_gib, default=0.0),
        "service_cores": (cpu_at_end[0] - cpu_at_start[0]) / elapsed,
        "synthesis_process_cores": (cpu_at_end[1] - cpu_at_start[1]) / elapsed,
        "gpus": per_gpu,
        "pool": {
            "slots": pool.slots_total if pool else 0,
            "gib": pool.total_bytes / 2**30 if pool else 0,
            "allocations_after_warmup": (pool.allocations - warm_allocations) if pool else 0,
            "waits": pool.waits if pool else 0,
            "fallbacks": pool.fallbacks if pool else 0,
        },
    }
    results.append(result)
    print(table([result]), file=sys.stderr)
    save(results)
    await server.shutdown()


def save(results: list[dict[str, Any]]) -> None:
    out = os.environ.get("OUT")
    if out:
        Path(out, "gpu_service.json").write_text(json.dumps(results, indent=2, default=str))


def table(results: list[dict[str, Any]]) -> str:
    rows = []
    for r in results:
        for g, s in r["gpus"].items():
            nvml = "" if s["nvml_util_mean"] is None else f"{s['nvml_util_mean']:.1f} %"
            rows.append((
                r["policy"], g, s["workers"], f"{r['partitions_per_s']:.2f}",
                f"{s['busy_ratio']:.3f}", s["idle_gaps"],
                f"{s['idle_gap_p99_ms']:.1f}" if s["idle_gaps"] else "none", nvml,
                f"{r['inflight_gib_mean']:.1f} / {r['inflight_gib_max']:.1f}",
                f"{r['synthesis_mean_s'] or 0:.2f}",
                r["pool"]["allocations_after_warmup"], r["pool"]["waits"], r["pool"]["fallbacks"],
            ))  # fmt: skip
    headers = ("policy", "gpu", "workers", "partitions/s", "busy ratio", "idle gaps",
               "idle gap p99 ms", "NVML util", "in flight GiB mean / max", "synthesis s",
               "pinned allocs after warm-up", "pool waits", "fallbacks")  # fmt: skip
    return render(headers, rows)


def main() -> int:
    parser = doc_parser(__doc__)
    parser.add_argument("--seconds", type=float, default=120.0, help="measured window per policy")
    parser.add_argument("--warmup", type=float, default=30.0, help="run before measuring (s)")
    parser.add_argument(
        "--policies", default="pi", help="comma-separated: pi, unpaced, cuzk, cuzk-default"
    )
    parser.add_argument("--log-n", type=int, default=None, help="partition size (default: 27)")
    parser.add_argument("--partitions", type=int, default=64, help="partitions per job")
    parser.add_argument("--workers-per-device", type=int, default=None, help="default: setting")
    parser.add_argument("--devices", default="all", help="PACER_GPU__DEVICES")
    parser.add_argument("--verify-every", type=int, default=None, help="PACER_VERIFY_EVERY")
    parser.add_argument(
        "--executor", choices=("threads", "processes"), default=None,
        help="PACER_SYNTHESIS__EXECUTOR (default: the setting's default)",
    )  # fmt: skip
    parser.add_argument(
        "--cpu-backend", choices=("auto", "numba", "numpy"), default=None,
        help="PACER_NTT__CPU_BACKEND (default: the setting's default)",
    )  # fmt: skip
    parser.add_argument(
        "--field", choices=("babybear", "goldilocks"), default=None,
        help="PACER_NTT__FIELD (default: the setting's default)",
    )  # fmt: skip
    parser.add_argument(
        "--chunk-log2",
        type=int,
        default=None,
        help="threads executor: log2 of the elements a synthesis handles per step (default: "
        "gpu.reference.synthesis.THREADED_STEP); worker processes keep cache-sized steps",
    )
    args = parser.parse_args()
    if args.chunk_log2 is not None:
        import gpu.reference.synthesis

        gpu.reference.synthesis.THREADED_STEP = 1 << args.chunk_log2
    import uvloop

    results: list[dict[str, Any]] = []
    for policy in args.policies.split(","):
        uvloop.run(run_policy(args, policy, results))
    first = results[0]
    print(f"partition 2^{first['log_n']} of {first['field']}, "
          f"synthesis concurrency {first['synthesis_concurrency']} on {first['executor']} "
          f"(CPU backend {first['cpu_backend']}), "
          f"pool {first['pool']['slots']} slots ({first['pool']['gib']:.1f} GiB), "
          f"{args.warmup:.0f} s warm-up, {args.seconds:.0f} s measured")  # fmt: skip
    print(table(results))
    for r in results:
        phases = next(iter(r["gpus"].values()))["phase_ms"] if r["gpus"] else {}
        synthesis = r["synthesis_mean_s"] or 0.0
        parts = [
            f"start {r['start_s']:.1f} s",
            f"synthesis mean {synthesis:.2f} s",
            f"cores used by the service {r['service_cores']:.1f} and by its synthesis "
            f"processes {r['synthesis_process_cores']:.1f}",
        ]
        if r["synthesis_cap_per_s"] and r["gpu_rate_per_s"]:  # the controller's, under pi
            parts.append(f"synthesis cap {r['synthesis_cap_per_s']:.2f}/s against a GPU rate "
                         f"of {r['gpu_rate_per_s']:.2f}/s")  # fmt: skip
        parts.append("phases ms " + ", ".join(f"{k} {v:.1f}" for k, v in phases.items()))
        print(f"{r['policy']}: " + ", ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
