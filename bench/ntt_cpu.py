"""Time the NumPy NTT workload: one compute_h and one forward NTT per size.

    .venv/bin/python -m bench.ntt_cpu [--markdown] [--repeats N] [--field babybear goldilocks]
                                      [--log-n 14 16 18 20] [--cpu-backend numpy numba]

Prints, per field and log_n, the median wall time over N repeats (default 3) of
`gpu.reference.ntt.compute_h` on one synthesized partition, of one `gpu.reference.ntt.ntt` of the
same length
and, with each CPU backend named, of one `gpu.reference.synthesis.synthesize_into` into arrays of
the
field's storage dtype and one `gpu.reference.verification.verify` of that partition's H. A warm-up
call first builds the cached twiddle tables (and compiles a Numba kernel), so the times are of
the steady state.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from gpu.field import FIELD_NAMES, by_name
from gpu.reference.cpu_backend import CPU_BACKENDS
from gpu.reference.ntt import compute_h, ntt
from gpu.reference.synthesis import synthesize, synthesize_into
from gpu.reference.verification import verify
from pacer.cli.table import render

SIZES_LOG_N = (14, 16, 18, 20)


def median_ms(run: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``run()`` in milliseconds, after one untimed warm-up call."""
    run()
    times_s = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times_s.append(time.perf_counter() - started)
    return statistics.median(times_s) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="Markdown table")
    parser.add_argument(
        "--repeats", type=int, default=3, metavar="N", help="timed runs per size (default 3)"
    )
    parser.add_argument(
        "--field", nargs="+", choices=FIELD_NAMES, default=["babybear"], help="default: babybear"
    )
    parser.add_argument("--log-n", nargs="+", type=int, default=list(SIZES_LOG_N))
    parser.add_argument(
        "--cpu-backend", nargs="+", choices=CPU_BACKENDS, default=["numpy"], help="default: numpy"
    )
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    rows = []
    for field in map(by_name, args.field):
        for log_n in args.log_n:
            a, b, c = synthesize(seed=0, index=0, log_n=log_n, field=field)
            h = compute_h(a, b, c, field=field)
            h_ms = median_ms(partial(compute_h, a, b, c, field=field), args.repeats)
            ntt_ms = median_ms(partial(ntt, a, field=field), args.repeats)
            out = [np.empty(1 << log_n, dtype=field.storage) for _ in range(3)]
            by_backend = []
            for backend in args.cpu_backend:
                fill = partial(synthesize_into, 0, 1, out, field=field, backend=backend)
                check = partial(verify, a, b, c, h, 2**20 + 1, field=field, backend=backend)
                by_backend += [median_ms(fill, args.repeats), median_ms(check, args.repeats)]
            rows.append((field.name, log_n, 1 << log_n, f"{h_ms:.1f}", f"{ntt_ms:.2f}",
                         *(f"{ms:.2f}" for ms in by_backend)))  # fmt: skip
    timed = [f"{what} ms ({k})" for k in args.cpu_backend for what in ("synthesis", "verify")]
    headers = ("field", "log_n", "n", "compute_h ms", "ntt ms", *timed)
    print(render(headers, rows, markdown=args.markdown))
    print()
    print(
        f"median of {args.repeats} after a warm-up; numpy {np.__version__}, "
        f"{platform.python_implementation()} {platform.python_version()}, {platform.machine()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
