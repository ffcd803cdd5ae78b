"""`pacer serve` on a GPU host, measured by its own metrics and cross-checked against NVML.

    python -m bench.gpu_service [--seconds 120] [--log-n 20] [--jobs 40] [--partitions 64]

Runs the service in-process with the ntt workload on every visible GPU (synthesis on this
host's cores, partitions from the pinned pool), keeps a backlog of jobs waiting, and reports:
throughput, the controller's mode and estimates, per GPU the busy ratio over the run from
``pacer_gpu_busy_seconds_total`` and the idle-gap p99 (gaps recorded as the pipeline reports
them), NVML utilization sampled every 100 ms, and the pool's counters (allocations after
warm-up must stay 0). Writes ``$OUT/gpu_service.json`` when OUT is set.
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
from pacer.config import Settings
from pacer.pipeline import Outcome
from pacer.service import Service
from pacer.table import render


class Gaps:
    """Wraps the service's observer to keep every idle gap per worker."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gaps: dict[int, list[float]] = {}

    def synthesized(self, seconds: float) -> None:
        self.inner.synthesized(seconds)

    def proved(self, worker: int, gpu_s: float, phases_s: dict[str, float]) -> None:
        self.inner.proved(worker, gpu_s, phases_s)

    def idle_gap(self, worker: int, seconds: float) -> None:
        self.gaps.setdefault(worker, []).append(seconds)
        self.inner.idle_gap(worker, seconds)

    def finished(self, outcome: Outcome) -> None:
        self.inner.finished(outcome)


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


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp())
    settings = Settings(
        ntt={"log_n": args.log_n},
        gpu={"workers_per_device": args.workers_per_device},
        synthesis={"threads_per_synthesis": 1},
        verify_every=0,
        journal={"path": tmp / "journal.sqlite"},
        api={"port": 0},
    )
    service = Service(settings, CollectorRegistry())
    gaps = Gaps(service.metrics)
    service.pipeline.observer = gaps
    await service.start()
    pool = service.pipeline.pool
    warm_allocations = pool.allocations if pool is not None else 0
    stop = threading.Event()
    nvml: dict[int, list[int]] = {}
    sampler = threading.Thread(target=nvml_sampler, args=(stop, nvml), daemon=True)
    for _ in range(args.jobs):
        await service.submit(args.partitions, {}, 0)
    started = time.perf_counter()
    proved_at_start = service.pipeline.proved
    busy_at_start = [service.pipeline.busy_seconds(w) for w in range(service.pipeline.workers)]
    sampler.start()
    while time.perf_counter() - started < args.seconds:
        await asyncio.sleep(1.0)
        if service.pipeline.backlog < args.partitions * 4:
            await service.submit(args.partitions, {}, 0)  # keep the backlog waiting
        print(f"  {time.perf_counter() - started:4.0f} s: {service.pipeline.proved} proved, "
              f"mode {service.controller.terms.mode}", file=sys.stderr)  # fmt: skip
    elapsed = time.perf_counter() - started
    stop.set()
    sampler.join(2)
    p = service.pipeline
    workers = p.workers
    busy = [(p.busy_seconds(w) - busy_at_start[w]) / elapsed for w in range(workers)]
    result = {
        "seconds": elapsed,
        "log_n": args.log_n,
        "workers": workers,
        "partitions_per_s": (p.proved - proved_at_start) / elapsed,
        "busy_ratio": busy,
        "idle_gap_p99_ms": {w: quantile(g, 0.99) * 1000 for w, g in gaps.gaps.items() if g},
        "nvml_mean_util": {d: sum(v) / len(v) for d, v in nvml.items() if v},
        "estimates": service.controller.estimates.__dict__,
        "mode": str(service.controller.terms.mode),
        "synthesis_concurrency": service.caps.synthesis_concurrency,
        "pool": {
            "slots": pool.slots_total if pool else 0,
            "allocations_after_warmup": (pool.allocations - warm_allocations) if pool else 0,
            "waits": pool.waits if pool else 0,
            "fallbacks": pool.fallbacks if pool else 0,
        },
    }
    await service.shutdown()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--log-n", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--workers-per-device", type=int, default=1)
    args = parser.parse_args()
    import uvloop

    result = uvloop.run(run(args))
    rows = [
        (w, f"{result['busy_ratio'][w]:.3f}", f"{result['idle_gap_p99_ms'].get(w, 0):.2f}")
        for w in range(result["workers"])
    ]
    print(render(("worker", "busy ratio", "idle gap p99 ms"), rows))
    summary = {k: v for k, v in result.items() if k not in ("busy_ratio", "idle_gap_p99_ms")}
    print(json.dumps(summary, default=str))
    out = os.environ.get("OUT")
    if out:
        Path(out, "gpu_service.json").write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
