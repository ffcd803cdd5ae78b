"""What `pacer serve` does before its pool starts pinning, on the GPU workload's settings.

    python -m bench.before_prepare [--runs 5]

Each run (after one not counted, which compiles the bytecode as an install would:
`bench.installed`) is a fresh process with a fresh journal that, as ``pacer serve``, imports
what it imports before its first steps and takes them as it does
(`pacer.service.first_steps`), up to the moment the workload's ``prepare`` begins (pinning the
pool: everything before it is the critical path of a start); ``prepare`` itself is not run.
``PACER_NTT__LOG_N``, ``PACER_NTT__FIELD`` and ``PACER_SYNTHESIS__EXECUTOR`` default to what a
GPU host runs (27, goldilocks, processes). Prints, per run: launch → imports done, the first
steps (the journal's lock, the workload, the plan), launch → ``prepare``, the workload loaded,
whether CuPy or Numba had been imported by then, and whether the HTTP server had (it should
not).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.installed import bytecode_env
from pacer.cli.table import render

ROOT = Path(__file__).resolve().parents[1]
GPU_HOST = {"PACER_NTT__LOG_N": "27", "PACER_NTT__FIELD": "goldilocks",
            "PACER_SYNTHESIS__EXECUTOR": "processes"}  # fmt: skip

CHILD = """
import sys, time
launched = float(sys.argv[1])
sys.argv[1:] = ["serve"]  # what pacer.__main__ begins for a `pacer serve` as it is imported
import pacer.__main__
from pacer import config
from pacer.runtime import logs
from pacer.service import resources as host
from pacer.service.first_steps import FirstSteps
imported = time.time()

reached = []

def prepare_pool(*args, **kwargs):
    reached.append((time.time(), sorted(m for m in ("cupy", "numba") if m in sys.modules)))

host.prepare_pool = prepare_pool
settings = config.load_settings()
logs.setup("warning", "text")
steps = FirstSteps(settings)
steps.take()
steps.begin_prepare()
if steps.preparing is not None:
    steps.preparing.result()
steps.release()
at, modules = reached[0] if reached else (time.time(), [])  # no pool (no GPU): none to pin
import json
print(json.dumps({"imports_ms": (imported - launched) * 1000,
                  "first_steps_ms": steps.taken_s * 1000,
                  "to_prepare_ms": (at - launched) * 1000,
                  "workload": type(steps.workload).__name__, "imported": modules,
                  "http_server": "aiohttp" in sys.modules}))
"""


def run_once() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pacer-before-prepare-") as tmp:
        env = {**GPU_HOST, **bytecode_env(), "PACER_JOURNAL__PATH": f"{tmp}/journal.sqlite",
               "PACER_API__PORT": "0"}  # fmt: skip
        launched = time.time()
        ran = subprocess.run([sys.executable, "-c", CHILD, repr(launched)], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    if ran.returncode != 0:
        raise RuntimeError(f"the run failed:\n{ran.stderr}")
    result: dict[str, Any] = json.loads(ran.stdout.splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    run_once()  # compiles the bytecode (`bench.installed`), as an install does: not counted
    runs = [run_once() for _ in range(args.runs)]
    rows = [
        [f"{run['imports_ms']:.0f}", f"{run['first_steps_ms']:.0f}",
         f"{run['to_prepare_ms']:.0f}", run["workload"], ", ".join(run["imported"]) or "neither",
         "yes" if run["http_server"] else "no"]
        for run in runs
    ]  # fmt: skip
    header = ["imports (ms)", "first steps (ms)", "launch → prepare (ms)", "workload",
              "CuPy, Numba", "HTTP server"]  # fmt: skip
    print(render(header, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
