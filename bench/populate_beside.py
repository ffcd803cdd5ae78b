"""Filling in the page tables of shared memory blocks, alone and with other work beside it.

    python -m bench.populate_beside [--gib 24] [--blocks 8] [--threads 8] [--runs 2]

A cold start's pinning is mostly filling in this process's page tables for the pool's blocks
(`gpu.pool.allocators.populate`: MADV_POPULATE_WRITE, page by page in the kernel). Each run makes
``--blocks`` memfd blocks of ``--gib`` GiB in all and fills them on ``--threads`` threads:

- ``alone``: nothing else running;
- ``mapping beside, this process``: a thread of this process maps, touches and unmaps 1 MiB
  of anonymous memory in a loop (what a start's imports, allocations, thread stacks and CUDA
  context do now and then: each such call takes the process's address-space lock for writing,
  which the filling threads hold for reading);
- ``mapping beside, another process``: the same loop in a process of its own;
- ``fallocated first``: each block's pages allocated by ``fallocate`` before the filling (no
  mapping, so no address-space lock), the filling then timed alone.

Prints the seconds of each (median and range over the runs).
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import multiprocessing
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.process import BaseProcess

from bench.restart import median_range
from gpu.pool.allocators import populate
from gpu.shm.blocks import HostBlock, create_block
from pacer.cli.table import render

GIB = 2**30


def _map_in_a_loop(stop: threading.Event | None = None) -> None:
    while stop is None or not stop.is_set():
        mapping = mmap.mmap(-1, 1 << 20)
        mapping[0] = 1
        mapping.close()


def _fallocate(block: HostBlock) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    assert block.fd is not None
    if libc.fallocate(block.fd, 0, ctypes.c_long(0), ctypes.c_long(block.size)) != 0:
        raise OSError(ctypes.get_errno(), "fallocate")


def _fill(block: HostBlock) -> None:
    address = ctypes.addressof(ctypes.c_char.from_buffer(block.mapping))
    if not populate(address, block.size):
        raise SystemExit("MADV_POPULATE_WRITE is not available here (Linux 5.14)")


def one(blocks: int, block_bytes: int, threads: int, beside: str) -> tuple[float, float]:
    """Seconds to fill ``blocks`` new blocks with ``beside`` running, and the seconds of the
    fallocate before (0 unless ``beside`` is "fallocate")."""
    made = [create_block(block_bytes, memfd=True) for _ in range(blocks)]
    stop = threading.Event()
    loop: threading.Thread | BaseProcess | None = None
    try:
        began = time.perf_counter()
        if beside == "fallocate":
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(_fallocate, made))
        allocated = time.perf_counter()
        if beside == "thread":
            loop = threading.Thread(target=_map_in_a_loop, args=(stop,))
        elif beside == "process":
            loop = multiprocessing.get_context("spawn").Process(target=_map_in_a_loop)
        if loop is not None:
            loop.start()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(_fill, made))
        return time.perf_counter() - allocated, allocated - began
    finally:
        stop.set()
        if isinstance(loop, BaseProcess):
            loop.kill()
        if loop is not None:
            loop.join()
        for block in made:
            block.close()


CASES = {
    "alone": "alone",
    "thread": "mapping beside, this process",
    "process": "mapping beside, another process",
    "fallocate": "fallocated first",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=24.0, help="the blocks' size in all")
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    block_bytes = int(args.gib * GIB / args.blocks) // mmap.PAGESIZE * mmap.PAGESIZE
    seconds: dict[str, list[tuple[float, float]]] = {case: [] for case in CASES}
    for _ in range(args.runs):
        for case in CASES:
            seconds[case].append(one(args.blocks, block_bytes, args.threads, case))
    total = args.blocks * block_bytes / GIB
    rows = []
    for case, label in CASES.items():
        fills = [fill for fill, _ in seconds[case]]
        before = [seconds for _, seconds in seconds[case]]
        rows.append([label, median_range(fills, 2), f"{total / statistics.median(fills):.1f}",
                     f"{median_range(before, 2)} s" if case == "fallocate" else ""])  # fmt: skip
    print(f"{args.blocks} memfd blocks, {total:.1f} GiB, filled on {args.threads} threads "
          f"(os.cpu_count() {os.cpu_count()})")  # fmt: skip
    print(render(["case", "filling (s)", "GiB/s", "fallocate before"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
