"""Cold starts of `pacer serve` on a GPU host, each against the pinning of its pool alone.

    python -m bench.cold_start [--runs 3] [--budget 64GiB] [--variants main,...] [--logs DIR]

A start is cold when no pool is kept for it: it pins the whole pool, and its target is to be
ready within 1.2 × that pinning done alone (`bench.restart.pin_alone`: the same pool, the
same threads, nothing beside). First the pool is pinned alone once (the first touch of a
fresh machine's memory: later ones find it touched), and a small start fills the compiled
kernels' caches (and the bytecode's: `bench.installed`) as a host's earlier runs would. Then,
``--runs`` times, each variant in turn: the pool pinned alone, then a cold start of that
variant (launch → ``/readyz``, its phases from ``/v1/status``), stopped at once (the pool
freed, not kept).

The variants are the service as it is (``main``: ``PACER_WORKLOAD=ntt``, nothing of this
module imported by the service) and the same start changed in one way, to say what slows the
pinning inside a start (each a workload factory of this module,
``PACER_WORKLOAD=bench.cold_start:<name>``, which a start then imports too):

- ``quiet``: the provers and the synthesis processes start once the pool is pinned (the
  pinning has only the service's own start beside it);
- ``late_provers``: the provers are built once the pool is pinned (the synthesis processes
  start beside it);
- ``late_synthesis``: the synthesis processes start once the pool is pinned (the provers are
  built beside it);
- ``all_cores``: the pool pinned on a thread per core (its pinning alone too).

Prints a table (median and range over the runs) and each start's pinning parts; writes
``$OUT/cold_start.json`` when OUT is set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.restart import Instance, free_port, median_range, pinning_alone
from gpu.shm.record import sweep
from gpu.workload import GpuNttWorkload, ntt
from pacer.cli.table import render
from pacer.config import Settings
from pacer.settle.detector import parse_size

VARIANTS = ("main", "quiet", "late_provers", "late_synthesis", "all_cores")


def _gpu(settings: Settings) -> GpuNttWorkload:
    workload = ntt(settings)
    if not isinstance(workload, GpuNttWorkload):
        raise SystemExit("no CUDA device here: a cold start pins nothing")
    return workload


def _as(variant: type[GpuNttWorkload], workload: GpuNttWorkload) -> GpuNttWorkload:
    """``workload`` (built by the service's own factory) made an instance of ``variant``, a
    subclass that changes one method."""
    workload.__class__ = variant
    return workload


class _Quiet(GpuNttWorkload):
    def prepare(self, slots: int, budget_bytes: int, synthesis_workers: int) -> None:
        from gpu.procs.executor import ProcessSynthesizer

        if self.kernel == "numba":
            self._kernels_loaded = self._load_kernels()
        self.pool = self._timed("pool", self._build_pool, slots, budget_bytes)
        self._synthesizer = ProcessSynthesizer(synthesis_workers, self.pool.block_paths,
                                               backend=self.kernel, field=self.field)  # fmt: skip
        with ThreadPoolExecutor(1) as beside:
            provers = beside.submit(self._timed, "provers", self._build_provers)
            self._timed("synthesis_processes", self._synthesizer.start)
            provers.result()


def quiet(settings: Settings) -> GpuNttWorkload:
    return _as(_Quiet, _gpu(settings))


class _LateProvers(GpuNttWorkload):
    def prepare(self, slots: int, budget_bytes: int, synthesis_workers: int) -> None:
        from gpu.procs.executor import ProcessSynthesizer

        self._synthesizer = ProcessSynthesizer(synthesis_workers, backend=self.kernel,
                                               field=self.field)  # fmt: skip
        with ThreadPoolExecutor(1) as beside:
            starting = beside.submit(self._timed, "synthesis_processes", self._synthesizer.start)
            self.pool = self._timed("pool", self._build_pool, slots, budget_bytes)
            self._kernels_loaded = self._load_kernels()
            starting.result()
        self._timed("provers", self._build_provers)


def late_provers(settings: Settings) -> GpuNttWorkload:
    return _as(_LateProvers, _gpu(settings))


class _LateSynthesis(GpuNttWorkload):
    def prepare(self, slots: int, budget_bytes: int, synthesis_workers: int) -> None:
        from gpu.procs.executor import ProcessSynthesizer

        with ThreadPoolExecutor(1) as beside:
            provers = beside.submit(self._timed, "provers", self._build_provers)
            self.pool = self._timed("pool", self._build_pool, slots, budget_bytes)
            self._kernels_loaded = self._load_kernels()
            self._synthesizer = ProcessSynthesizer(synthesis_workers, backend=self.kernel,
                                                   field=self.field)  # fmt: skip
            self._timed("synthesis_processes", self._synthesizer.start)
            provers.result()


def late_synthesis(settings: Settings) -> GpuNttWorkload:
    return _as(_LateSynthesis, _gpu(settings))


def all_cores(settings: Settings) -> GpuNttWorkload:
    from gpu.pool import allocators

    allocators.PIN_THREADS = os.cpu_count() or 1
    return _gpu(settings)


def run(args: argparse.Namespace) -> dict[str, Any]:
    sweep(drop_kept=True)
    out: dict[str, Any] = {"budget": args.budget, "variants": {}}
    with tempfile.TemporaryDirectory(prefix="pacer-cold-") as tmp:
        workdir = Path(tmp)
        out["pin_alone_first"] = pinning_alone(args, workdir, whole=True)
        warm = Instance(args, workdir, None, free_port(), PACER_GPU__KEEP_POOL="false",
                        PACER_MEMORY__BUDGET_BYTES=args.warm_budget,
                        PACER_SYNTHESIS__EXECUTOR="threads")  # fmt: skip
        try:
            warm.wait_ready(args.ready_timeout_s)
        finally:
            warm.stop()
        for number in range(args.runs):
            for variant in args.variants:
                threads = (os.cpu_count() or 1) if variant == "all_cores" else None
                alone = pinning_alone(args, workdir, threads, whole=True)
                one = cold_start(args, workdir, variant)
                one["pin_alone"] = alone
                out["variants"].setdefault(variant, []).append(one)
                print(f"run {number + 1}, {variant}: ready {one['ready_s']:.1f} s, pinning "
                      f"alone {alone['s']:.1f} s", flush=True)  # fmt: skip
    sweep(drop_kept=True)
    return out


def cold_start(args: argparse.Namespace, workdir: Path, variant: str) -> dict[str, Any]:
    sweep(drop_kept=True)
    (workdir / "journal.sqlite").unlink(missing_ok=True)
    workload = args.workload if variant == "main" else f"bench.cold_start:{variant}"
    launch = argparse.Namespace(**{**vars(args), "workload": workload})
    instance = Instance(launch, workdir, None, free_port(), PACER_GPU__KEEP_POOL="false")
    try:
        ready_s = instance.wait_ready(args.ready_timeout_s)
        startup = instance.client.status()["startup"]
    finally:
        instance.stop()
    lines = instance.log_path.read_text(errors="replace").splitlines()
    parts = [line.partition("took ")[2] for line in lines if "threads took" in line]
    return {
        "ready_s": ready_s,
        "startup": startup,
        "pin_parts": parts[-1] if parts else "",
        "log": instance.startup_lines(),
    }


def report(out: dict[str, Any]) -> None:
    rows = []
    for variant, runs in out["variants"].items():
        alone = [one["pin_alone"]["s"] for one in runs]
        ready = [one["ready_s"] for one in runs]
        phases = [one["startup"]["phases_s"] for one in runs]
        before = [one["ready_s"] - one["startup"]["ready_s"] for one in runs]
        rows.append([
            variant, median_range(ready), median_range(alone),
            median_range([r / statistics.median(alone) for r in ready], 2),
            median_range([p.get("prepare.pool", 0.0) for p in phases]),
            median_range(before), median_range([p.get("open", 0.0) for p in phases]),
            median_range([p.get("prepare.provers", 0.0) for p in phases]),
            median_range([p.get("prepare.synthesis_processes", 0.0) for p in phases]),
        ])  # fmt: skip
    first = out["pin_alone_first"]
    print(f"pool pinned alone first of all (first touch): {first['s']:.1f} s ({first['parts']})")
    print(render(["variant", "launch → ready (s)", "pinning alone (s)", "ready ÷ alone",
                  "pinning in the start (s)", "launch → start (s)", "open (s)",
                  "provers (s)", "synthesis processes (s)"], rows))  # fmt: skip
    for variant, runs in out["variants"].items():
        for number, one in enumerate(runs, 1):
            print(f"{variant} {number}: in the start {one['pin_parts']}; alone "
                  f"{one['pin_alone']['parts']}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("--budget", default="64GiB", help="PACER_MEMORY__BUDGET_BYTES")
    parser.add_argument("--runs", type=int, default=3, help="cold starts of each variant")
    parser.add_argument("--variants", default="main",
                        help=f"comma-separated, of: {', '.join(VARIANTS)}")  # fmt: skip
    parser.add_argument("--ready-timeout-s", type=float, default=300.0)
    parser.add_argument("--warm-budget", default="8GiB", help="the cache-filling start's")
    parser.add_argument("--drain-s", type=float, default=30.0)
    parser.add_argument("--logs", help="where the services' logs go (default: a temporary one)")
    args = parser.parse_args()
    parse_size(args.budget)
    args.variants = args.variants.split(",")
    unknown = sorted(set(args.variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    args.workload = "ntt"
    out = run(args)
    report(out)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "cold_start.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
