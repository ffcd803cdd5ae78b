"""`pacer serve`'s start-up phases with a shared pool and synthesis processes, on any machine.

    python -m bench.startup [--budget 4GiB] [--log-n 24] [--runs 2] [--cores 2]

Starts `pacer serve` ``--runs`` times, each cold (no pool kept), on `shared_pool_workload`:
the GPU workload's start-up without a GPU. Its pool is shared blocks whose pages are
populated before ready as the pinning would (``MADV_POPULATE_WRITE``, no cudaHostRegister),
mapped by the synthesis processes (``PACER_SYNTHESIS__EXECUTOR=processes``); no provers are
built, so it proves nothing: start-up only. Prints, per run, launch → ``/readyz`` and the
phases ``/v1/status`` reports (``startup``); writes ``$OUT/startup.json`` when OUT is set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpu.shm.record import sweep
from gpu.workload import GpuNttWorkload
from pacer.cli.table import render
from pacer.config import Settings


class SharedPoolWorkload(GpuNttWorkload):
    """`GpuNttWorkload` on shared blocks populated as a pinning would, without provers."""

    populate_pool = True


def shared_pool_workload(settings: Settings) -> GpuNttWorkload:
    """The factory ``PACER_WORKLOAD=bench.startup:shared_pool_workload`` names."""
    return SharedPoolWorkload(
        settings.ntt.log_n or 24, [0], 1, "wait", settings.synthesis.executor,
        pool_backend="shared", field=settings.ntt.field, backend=settings.ntt.cpu_backend,
        shm_dir=settings.gpu.shm_dir,
    )  # fmt: skip


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from bench.restart import Instance, free_port

    runs = []
    with tempfile.TemporaryDirectory(prefix="pacer-startup-") as tmp:
        workdir = Path(tmp)
        launch = argparse.Namespace(
            budget=args.budget, drain_s=5, workload="bench.startup:shared_pool_workload",
            logs=None,
        )  # fmt: skip
        for _ in range(args.runs):
            sweep(drop_kept=True)
            (workdir / "journal.sqlite").unlink(missing_ok=True)
            instance = Instance(launch, workdir, None, free_port(),
                                PACER_GPU__KEEP_POOL="false", PACER_NTT__LOG_N=str(args.log_n),
                                PACER_SYNTHESIS__EXECUTOR="processes",
                                PACER_SYNTHESIS__CORES=str(args.cores))  # fmt: skip
            try:
                ready_s = instance.wait_ready(300)
                startup = instance.client.status()["startup"]
            finally:
                instance.stop()
            runs.append({"launch_to_ready_s": round(ready_s, 2), **startup,
                         "log": instance.startup_lines()})  # fmt: skip
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default="4GiB", help="PACER_MEMORY__BUDGET_BYTES")
    parser.add_argument("--log-n", type=int, default=24, help="PACER_NTT__LOG_N")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2, help="PACER_SYNTHESIS__CORES")
    args = parser.parse_args()
    runs = run(args)
    phases = sorted({name for entry in runs for name in entry["phases_s"]})
    rows = [["launch → ready", *(f"{entry['launch_to_ready_s']:.2f}" for entry in runs)]]
    rows += [[name, *(f"{entry['phases_s'].get(name, 0):.2f}" for entry in runs)]
             for name in phases]  # fmt: skip
    print(render(["phase (s)", *(f"run {i + 1}" for i in range(len(runs)))], rows))
    for entry in runs:
        print("\n".join(entry["log"]))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "startup.json").write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
