"""Threads or processes for CPU synthesis: throughput, latency and the proving thread's share.

    .venv/bin/python -m bench.synthesis_executor [--log-n K ...] [--partitions N] [--workers W]
        [--repeats R] [--start-method {forkserver,spawn,fork}] [--markdown]

For each log_n (default 16 and 18) it synthesizes partitions (`gpu.reference.synthesis.synthesize`:
a, b, c,
24 bytes per element) with W workers (default: the CPU count) through three executors, the
buffers always ending up in this process, where the service needs them:

- threads: a `ThreadPoolExecutor`; the buffers never leave the process.
- processes+pickle: a `ProcessPoolExecutor`; the buffers are pickled back as the call's result.
- processes+shm: a `ProcessPoolExecutor` whose workers write into `SharedMemory` blocks that
  this process allocated and recycles (a pool, as the pinned host pool will be); this process
  reads numpy views over them, no copy. Workers keep each block attached between calls.

A batch is N partitions (default 48) with W always in flight, as the service's synthesis pool
runs. Latency is from submission until the buffers are usable here (for pickle: unpickled);
throughput is N over the batch's wall time. Each executor runs R batches (default 5) with the
process otherwise idle, and R with one more thread running `gpu.reference.ntt.compute_h` in a loop
on
other buffers, as a proving worker does ("prover busy"). Such a batch starts as a compute_h
call starts and keeps the load on until the call in progress at its end has finished, so the
calls counted ("h done") are whole and ran under synthesis throughout; "h/s" is their rate,
against the same thread with no synthesis running ("alone", measured in every round).
On W cores with W synthesis workers the OS alone would give the prover about W/(W + 1) of a
core; threads that starve it through the GIL show as a lower share than processes get.

Throughput is the median over the R batches; latency percentiles pool all of them. The
executors take turns batch by batch, in a rotating order, so drift in a shared machine's speed
favours none. Start-up (from creating a pool until every worker has synthesized one partition
of the size, numpy imported; for shm also allocating and writing the blocks) is timed apart
from the batches. Process pools use the forkserver start method by default, preloading
`gpu.reference.synthesis`: the service runs threads, which `fork` does not survive safely. The
first batch's
partitions 0, N/2 and N − 1 are hashed (`gpu.reference.digest.digest`) and compared across
executors;
exits 1 if they differ.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import multiprocessing
import multiprocessing.forkserver
import os
import platform
import sys
import threading
import time
from concurrent.futures import (
    FIRST_COMPLETED,
    Executor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from dataclasses import dataclass, field
from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext
from multiprocessing.shared_memory import SharedMemory
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

import numpy as np

from gpu.field.prime import FieldArray
from gpu.reference import ntt, synthesis
from gpu.reference.digest import digest
from pacer.cli.table import render

SEED = 2026
VECTORS = 3  # a, b, c
Buffers = tuple[FieldArray, FieldArray, FieldArray]
Digests = tuple[str, str, str]
_Result = TypeVar("_Result")
StartContext = ForkServerContext | SpawnContext | ForkContext
# Blocks this worker process has attached, by name: mapping one costs a system call and a page
# fault per 4 KiB on first touch, which a real pool would pay once, not once per partition.
_attached: dict[str, SharedMemory] = {}


# Set in each pool worker by `join_warm_up`: holds every worker in its warm-up call until all
# have one, so that each worker runs exactly one.
_warm_up_barrier: threading.Barrier | None = None


def join_warm_up(barrier: threading.Barrier) -> None:
    """The pools' initializer: the barrier `warm_up` waits on."""
    global _warm_up_barrier
    _warm_up_barrier = barrier


def warm_up(log_n: int) -> None:
    """Runs on a pool worker: one synthesis of this size, then waits for the other workers."""
    synthesis.synthesize(SEED, 0, log_n)
    if _warm_up_barrier is not None:
        _warm_up_barrier.wait(timeout=60)


def synthesize_into(block_name: str, seed: int, index: int, log_n: int) -> None:
    """Runs on a pool process: partition ``index``'s a, b, c written as rows of a shared block."""
    block = _attached.get(block_name)
    if block is None:
        block = _attached[block_name] = SharedMemory(name=block_name)
    rows = np.ndarray((VECTORS, 1 << log_n), dtype=np.uint64, buffer=block.buf)
    for row, values in zip(rows, synthesis.synthesize(seed, index, log_n), strict=True):
        np.copyto(row, values)


class Synthesis(Protocol[_Result]):
    """One way to get partitions synthesized into this process."""

    def submit(self, index: int) -> Future[_Result]:
        """Starts synthesizing partition ``index``."""
        ...

    def collect(self, index: int, result: _Result) -> Buffers:
        """The buffers of a finished partition, usable in this process."""
        ...

    def release(self, index: int) -> None:
        """The partition's buffers are no longer used (proved, in the service)."""
        ...


class PoolSynthesis:
    """`gpu.reference.synthesis.synthesize` on an executor; the buffers are the call's result."""

    def __init__(self, executor: Executor, log_n: int) -> None:
        self.executor = executor
        self.log_n = log_n

    def submit(self, index: int) -> Future[Buffers]:
        return self.executor.submit(synthesis.synthesize, SEED, index, self.log_n)

    def collect(self, index: int, result: Buffers) -> Buffers:
        return result

    def release(self, index: int) -> None:
        pass


class SharedMemorySynthesis:
    """Synthesis on pool processes into shared blocks from a recycled pool of this process's."""

    def __init__(self, executor: Executor, log_n: int, blocks: int) -> None:
        self.executor = executor
        self.log_n = log_n
        self.block_bytes = VECTORS * 8 << log_n
        self._blocks: list[SharedMemory] = []
        self._free = [self._new_block() for _ in range(blocks)]
        self._held: dict[int, SharedMemory] = {}

    def submit(self, index: int) -> Future[None]:
        block = self._free.pop() if self._free else self._new_block()
        self._held[index] = block
        return self.executor.submit(synthesize_into, block.name, SEED, index, self.log_n)

    def collect(self, index: int, result: None) -> Buffers:
        rows = np.ndarray((VECTORS, 1 << self.log_n), dtype=np.uint64, buffer=self._held[index].buf)
        return rows[0], rows[1], rows[2]

    def release(self, index: int) -> None:
        self._free.append(self._held.pop(index))

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Frees every block; no view over one may be left."""
        for block in self._blocks:
            block.close()
            block.unlink()
        self._blocks.clear()

    def _new_block(self) -> SharedMemory:
        block = SharedMemory(create=True, size=self.block_bytes)
        self._blocks.append(block)
        return block


@dataclass
class Batch:
    """One batch of partitions: when it ran (perf_counter s) and what was measured in it.

    ``prover_calls`` compute_h calls took ``prover_s`` seconds during it, if a prover ran.
    """

    started: float
    ended: float
    latencies_s: list[float]
    digests: dict[int, Digests]
    prover_calls: int = 0
    prover_s: float = 0.0

    @property
    def throughput(self) -> float:
        """Partitions per second."""
        return len(self.latencies_s) / (self.ended - self.started)


class Prover:
    """`gpu.reference.ntt.compute_h` in a loop on its own thread, as a proving worker runs it.

    ``spans`` holds each finished call's (start, end), perf_counter s. Leaving ``with`` stops
    the loop after the call in progress.
    """

    def __init__(self, buffers: Buffers) -> None:
        self.buffers = buffers
        self.spans: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._call_ended = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="prover")

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def wait_for_calls(self, finished: int) -> None:
        """Returns once ``finished`` calls have finished."""
        with self._call_ended:
            self._call_ended.wait_for(lambda: len(self.spans) >= finished or self._stopped)
        if len(self.spans) < finished:
            raise RuntimeError(f"the prover stopped after {len(self.spans)} calls")

    def next_call(self) -> int:
        """Waits for the call in progress to finish; the index of the call that starts then."""
        self.wait_for_calls(len(self.spans) + 1)
        return len(self.spans)

    def finished_since(self, moment: float) -> bool:
        """Whether a call has finished at or after ``moment``."""
        return bool(self.spans) and self.spans[-1][1] >= moment

    def window(self, first: int, until: float) -> tuple[int, float]:
        """Calls ``first`` .. the first to finish at or after ``until``: how many, and seconds."""
        last = next(i for i in range(first, len(self.spans)) if self.spans[i][1] >= until)
        return last - first + 1, self.spans[last][1] - self.spans[first][0]

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                started = time.perf_counter()
                ntt.compute_h(*self.buffers)
                with self._call_ended:
                    self.spans.append((started, time.perf_counter()))
                    self._call_ended.notify_all()
        finally:
            with self._call_ended:
                self._stopped = True
                self._call_ended.notify_all()


def run_batch(
    synthesis: Synthesis[_Result],
    partitions: int,
    in_flight: int,
    keep: frozenset[int] = frozenset(),
    prover: Prover | None = None,
) -> Batch:
    """Synthesizes partitions 0 .. partitions − 1 with ``in_flight`` always in flight.

    Once the last of them is submitted, more (uncounted) partitions keep the load up until the
    batch's partitions have all arrived and, with a ``prover``, until its call in progress has
    finished too: the batch starts as one of its calls starts, so the prover's calls during the
    batch are counted whole, all under the same load. ``keep``'s buffers are digested, the
    others released as they arrive.
    """
    submitted_at: dict[int, float] = {}
    finished_at: dict[int, float] = {}
    pending: dict[Future[_Result], int] = {}
    kept: dict[int, Buffers] = {}
    next_index = 0
    outstanding = partitions
    first_call = prover.next_call() if prover is not None else 0
    started = time.perf_counter()
    ended: float | None = None
    while True:
        if ended is None and outstanding == 0:
            ended = time.perf_counter()
        if ended is not None and (prover is None or prover.finished_since(ended)):
            break
        while len(pending) < in_flight:
            submitted_at[next_index] = time.perf_counter()
            future = synthesis.submit(next_index)
            future.add_done_callback(functools.partial(_stamp, finished_at, next_index))
            pending[future] = next_index
            next_index += 1
        done, _ = wait(pending, return_when=FIRST_COMPLETED)
        for future in done:
            index = pending.pop(future)
            buffers = synthesis.collect(index, future.result())
            if index < partitions:
                outstanding -= 1
            if index in keep:
                kept[index] = buffers
            else:
                synthesis.release(index)
    for future, index in pending.items():
        synthesis.collect(index, future.result())
        synthesis.release(index)
    latencies_s = [finished_at[i] - submitted_at[i] for i in range(partitions)]
    digests = {i: _digests(b) for i, b in kept.items()}
    kept.clear()
    for index in digests:
        synthesis.release(index)
    batch = Batch(started, ended, latencies_s, digests)
    if prover is not None:
        batch.prover_calls, batch.prover_s = prover.window(first_call, ended)
    return batch


def _stamp(finished_at: dict[int, float], index: int, _: object) -> None:
    finished_at[index] = time.perf_counter()


def _digests(buffers: Buffers) -> Digests:
    a, b, c = buffers
    return digest(a), digest(b), digest(c)


@dataclass
class Method:
    """One executor under test and its batches, without and with the prover running."""

    name: str
    synthesis: Synthesis[Any]
    startup_s: float
    idle: list[Batch] = field(default_factory=list)
    busy: list[Batch] = field(default_factory=list)


HEADERS = (
    "log_n",
    "executor",
    "prover",
    "start-up ms",
    "partitions/s",
    "p50 ms",
    "p99 ms",
    "h done",
    "h/s",
    "h/s vs alone",
)


def rows_for(log_n: int, method: Method, alone_h_per_s: float) -> list[list[object]]:
    """The method's two table rows (see HEADERS): prover idle, prover busy."""
    rows: list[list[object]] = []
    for busy, batches in ((False, method.idle), (True, method.busy)):
        throughputs = sorted(b.throughput for b in batches)
        latencies_ms = np.array([t for b in batches for t in b.latencies_s]) * 1e3
        p50, p99 = np.percentile(latencies_ms, [50, 99])
        calls = sum(b.prover_calls for b in batches)
        h_per_s = calls / sum(b.prover_s for b in batches) if busy else 0.0
        rows.append(
            [
                log_n,
                method.name,
                "busy" if busy else "idle",
                "-" if busy else f"{method.startup_s * 1e3:.0f}",
                f"{throughputs[len(throughputs) // 2]:.1f}",
                f"{p50:.1f}",
                f"{p99:.1f}",
                calls if busy else "-",
                f"{h_per_s:.2f}" if busy else "-",
                f"{h_per_s / alone_h_per_s:.2f}" if busy else "-",
            ]
        )
    return rows


@dataclass(frozen=True)
class Plan:
    """The benchmark's parameters, from the command line."""

    partitions: int
    workers: int
    repeats: int
    context: StartContext

    @property
    def keep(self) -> frozenset[int]:
        """The partitions whose digests are compared across executors."""
        return frozenset({0, self.partitions // 2, self.partitions - 1})


def measure_size(
    log_n: int, plan: Plan
) -> tuple[list[list[object]], dict[str, dict[int, Digests]]]:
    """The table rows for one size, and each executor's digests of the kept partitions.

    The executors take turns, batch by batch, in an order that rotates every round, so that a
    machine that speeds up or slows down over the run (a shared VM does) favours none of them.
    """
    prover_buffers = synthesis.synthesize(SEED, plan.partitions, log_n)  # not one of the batch's
    ntt.compute_h(*prover_buffers)  # builds the cached twiddle tables
    with contextlib.ExitStack() as stack:
        barrier = threading.Barrier(plan.workers)
        threads = stack.enter_context(
            ThreadPoolExecutor(plan.workers, "synth", join_warm_up, (barrier,))
        )
        methods = [Method("threads", PoolSynthesis(threads, log_n), _warm(threads, plan, log_n))]
        pickled = stack.enter_context(_process_pool(plan))
        startup_s = _warm(pickled, plan, log_n)
        methods.append(Method("processes+pickle", PoolSynthesis(pickled, log_n), startup_s))
        started = time.perf_counter()
        shared = stack.enter_context(_process_pool(plan))
        shm = stack.enter_context(SharedMemorySynthesis(shared, log_n, plan.workers))
        _warm(shared, plan, log_n)
        run_batch(shm, plan.workers, plan.workers)  # each block written once, as in steady state
        methods.append(Method("processes+shm", shm, time.perf_counter() - started))

        alone_calls, alone_s = 0, 0.0
        for round_ in range(plan.repeats):
            turn = round_ % len(methods)
            order = methods[turn:] + methods[:turn]
            for method in order:
                keep = plan.keep if round_ == 0 else frozenset()
                method.idle.append(run_batch(method.synthesis, plan.partitions, plan.workers, keep))
            with Prover(prover_buffers) as prover:
                first = prover.next_call()
                prover.wait_for_calls(first + 2)
                alone_calls += 2
                alone_s += prover.spans[first + 1][1] - prover.spans[first][0]
                for method in order:
                    method.busy.append(
                        run_batch(method.synthesis, plan.partitions, plan.workers, prover=prover)
                    )
            print(f"log_n {log_n}: round {round_ + 1}/{plan.repeats} done", file=sys.stderr)

    alone_h_per_s = alone_calls / alone_s
    rows = [row for m in methods for row in rows_for(log_n, m, alone_h_per_s)]
    rows.append(
        [log_n, "(none)", "busy", "-", "-", "-", "-", alone_calls, f"{alone_h_per_s:.2f}", "1.00"]
    )
    return rows, {m.name: m.idle[0].digests for m in methods}


def _process_pool(plan: Plan) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(
        plan.workers,
        mp_context=plan.context,
        initializer=join_warm_up,
        initargs=(plan.context.Barrier(plan.workers),),
    )


def _warm(executor: Executor, plan: Plan, log_n: int) -> float:
    """Seconds until each of the pool's workers has started and run `warm_up` once.

    Pools start a worker for each call that finds none idle, so all of them start here.
    """
    started = time.perf_counter()
    for future in [executor.submit(warm_up, log_n) for _ in range(plan.workers)]:
        future.result()
    return time.perf_counter() - started


def _time_process_start(context: StartContext) -> float:
    """Seconds to start, and wait for, one process that does nothing."""
    started = time.perf_counter()
    process = context.Process(target=os.getpid)
    process.start()
    process.join()
    return time.perf_counter() - started


def _check_digests(digests: dict[str, dict[int, Digests]]) -> list[str]:
    """Which executors' digests differ from the first executor's."""
    (reference_name, reference), *others = digests.items()
    return [f"{name} ≠ {reference_name}" for name, d in others if d != reference]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--log-n",
        type=int,
        action="append",
        metavar="K",
        help="partition size 2^K elements; repeatable (default: 16 and 18)",
    )
    parser.add_argument(
        "--partitions", type=int, default=48, metavar="N", help="per batch (default 48)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        metavar="W",
        help="pool size and partitions in flight (default: the CPU count)",
    )
    parser.add_argument(
        "--repeats", type=int, default=5, metavar="R", help="batches per measurement (default 5)"
    )
    parser.add_argument(
        "--start-method",
        choices=("forkserver", "spawn", "fork"),
        default="forkserver",
        help="for the process pools (default forkserver)",
    )
    parser.add_argument("--markdown", action="store_true", help="Markdown table")
    args = parser.parse_args()
    sizes: list[int] = args.log_n or [16, 18]
    for log_n in sizes:
        if not 1 <= log_n <= 24:
            parser.error(
                f"--log-n must be between 1 and 24 (24·2^K bytes a partition), got {log_n}"
            )
    for name in ("partitions", "workers", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")

    contexts: dict[str, StartContext] = {
        "forkserver": multiprocessing.get_context("forkserver"),
        "spawn": multiprocessing.get_context("spawn"),
        "fork": multiprocessing.get_context("fork"),
    }
    context = contexts[args.start_method]
    server_s = 0.0
    if args.start_method == "forkserver":
        # Children fork from a server that has numpy and gpu.reference.synthesis imported already.
        # It
        # imports them in the background; the first process it forks waits for that.
        context.set_forkserver_preload(["gpu.reference.synthesis"])
        started = time.perf_counter()
        multiprocessing.forkserver.ensure_running()
        _time_process_start(context)
        server_s = time.perf_counter() - started
    process_s = _time_process_start(context)
    plan = Plan(args.partitions, args.workers, args.repeats, context)

    rows: list[list[object]] = []
    mismatches: list[str] = []
    for log_n in sizes:
        size_rows, digests = measure_size(log_n, plan)
        rows += size_rows
        mismatches += [f"log_n {log_n}: {m}" for m in _check_digests(digests)]
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, "
        f"{platform.python_implementation()} {platform.python_version()}, numpy {np.__version__}"
    )
    print(
        f"{plan.partitions} partitions a batch, {plan.workers} workers (= in flight), "
        f"throughput the median of {plan.repeats} batches"
    )
    print(
        f"process start method {args.start_method}: one bare process {process_s * 1e3:.0f} ms"
        + (
            f"; the server, once, preloading gpu.reference.synthesis: {server_s * 1e3:.0f} ms"
            if server_s
            else ""
        )
    )
    print()
    print(render(HEADERS, rows, markdown=args.markdown))
    print()
    kept = ", ".join(str(i) for i in sorted(plan.keep))
    if mismatches:
        print(f"digests of partitions {kept} DIFFER: " + "; ".join(mismatches))
        return 1
    print(f"digests of partitions {kept} (a, b, c) identical across the three executors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
