"""How much a thread running Python slows synthesis on another thread, by synthesis step size.

    python -m bench.synthesis_gil [--log-n 24] [--chunks-log2 18 20 22] [--threads 1 2 4]

`gpu.reference.synthesis.synthesize_into` makes a few NumPy calls per step; each call gives up the
GIL and
must take it back. Its default (`cache` below) takes steps of `SYNTHESIS_CHUNK` elements and
makes c in `_PRODUCT_CHUNK` pieces, all in a core's cache; ``step=2^k`` takes steps of 2^k and
makes c in one go per step (fewer calls). Beside a thread that runs Python (here: counting, as
a busy event loop or a proving thread's launches would), every take-back can wait for that
thread's switch interval (1 ms, as the service sets it). Per step: ns per element alone and
beside the counting thread, and how much of its own rate the counting thread kept; then, with
no Python thread beside them, how many elements a second 1, 2, 4 ... synthesis threads make
together.
"""

from __future__ import annotations

import functools
import sys
import threading
import time

import numpy as np

from bench.threads import timed_threads
from bench.usage import doc_parser
from gpu.reference import synthesis
from pacer.cli.table import render


def counting(stop: threading.Event, counts: list[int]) -> None:
    count = 0
    while not stop.is_set():
        count += 1
    counts.append(count)


def synthesis_time(
    out: tuple[np.ndarray, ...], step: int | None, beside_python: bool
) -> tuple[float, float]:
    """(seconds for one synthesis, counts/s of the counting thread meanwhile or alone)."""
    stop = threading.Event()
    counts: list[int] = []
    counter = threading.Thread(target=counting, args=(stop, counts))
    if beside_python:
        counter.start()
    started = time.perf_counter()
    synthesis.synthesize_into(1, 0, out, step=step)
    seconds = time.perf_counter() - started
    if not beside_python:  # the counting thread alone, for as long
        counter.start()
        time.sleep(seconds)
        seconds_counted = seconds
    else:
        seconds_counted = time.perf_counter() - started
    stop.set()
    counter.join()
    return seconds, counts[0] / seconds_counted


def threads_rate(n: int, step: int | None, threads: int, repeats: int = 3) -> float:
    """Elements/s that ``threads`` threads synthesizing at once make together."""
    outs = [tuple(np.zeros(n, np.uint32) for _ in range(3)) for _ in range(threads)]
    for out in outs:
        synthesis.synthesize_into(1, 0, out, step=step)

    def run(out: tuple[np.ndarray, ...]) -> None:
        for index in range(repeats):
            synthesis.synthesize_into(1, index, out, step=step)

    return threads * repeats * n / timed_threads([functools.partial(run, out) for out in outs])


def main() -> int:
    parser = doc_parser(__doc__)
    parser.add_argument("--log-n", type=int, default=24)
    parser.add_argument("--chunks-log2", type=int, nargs="+", default=[18, 20, 22])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    sys.setswitchinterval(0.001)
    n = 1 << args.log_n
    out = tuple(np.zeros(n, np.uint32) for _ in range(3))
    steps: list[tuple[str, int | None]] = [("cache", None)]
    steps += [(f"step=2^{k}", 1 << k) for k in args.chunks_log2]
    rows: list[tuple[str, ...]] = []
    for label, step in steps:
        synthesis.synthesize_into(1, 0, out, step=step)  # warm: pages touched, tables built
        alone, counting_alone = synthesis_time(out, step, beside_python=False)
        beside, counting_beside = synthesis_time(out, step, beside_python=True)
        rows.append((
            label, f"{alone / n * 1e9:.2f}", f"{beside / n * 1e9:.2f}",
            f"{beside / alone:.2f}", f"{counting_beside / counting_alone:.0%}",
        ))  # fmt: skip
    print(f"synthesis of 2^{args.log_n} elements into uint32 arrays, switch interval 1 ms")
    headers = ("step", "ns/element alone", "ns/element beside Python", "slowdown",
               "counting thread kept")  # fmt: skip
    print(render(headers, rows))
    rows = []
    for label, step in steps:
        rates = [threads_rate(n // 2, step, t) / 1e6 for t in args.threads]
        rows.append((label, *(f"{r:.0f}" for r in rates)))
    print(render(("step", *(f"{t} threads, M elements/s" for t in args.threads)), rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
