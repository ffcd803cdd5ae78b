"""How fast the CPUs under a benchmark run the same fixed piece of work, over the run: a probe
process pinned to those CPUs times a small pure-Python loop in its own CPU time every
``period_s``, so that a change in what the benchmark measures can be told apart from a change
in the CPUs themselves (their clock, a neighbour sharing the core or its caches). The kernel's
steal time of those CPUs (time the hypervisor ran something else) is read beside it.

    >>> steal, ticks = steal_ticks({0})
    >>> 0 <= steal <= ticks
    True
    >>> CpuReference({0}).line()  # not started: no probe yet
    'reference work -, steal 0.0 %'
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from multiprocessing.connection import Connection

LOOP = 20_000  # iterations of the reference work: about a millisecond of one core
REPEATS = 3  # each probe takes the fastest of this many, so that a preemption does not count


def reference_work() -> int:
    """The fixed piece of work: a loop of integer arithmetic, branchy like a database's code
    and light on memory."""
    total = 0
    for i in range(LOOP):
        total += (i * i) % 7 if i & 1 else i >> 2
    return total


def _probe(cpus: set[int], period_s: float, out: Connection) -> None:
    """The probe process: every ``period_s``, the fastest of `REPEATS` runs of
    `reference_work`, in µs of its own CPU time, sent to ``out`` until the pipe closes."""
    os.sched_setaffinity(0, cpus)
    while True:
        best = float("inf")
        for _ in range(REPEATS):
            began = time.thread_time_ns()
            reference_work()
            best = min(best, (time.thread_time_ns() - began) / 1000)
        try:
            out.send(best)
        except (BrokenPipeError, OSError):
            return
        time.sleep(period_s)


def steal_ticks(cpus: set[int]) -> tuple[int, int]:
    """(steal, all) clock ticks of ``cpus`` so far, from /proc/stat; (0, 0) where unreadable."""
    steal = total = 0
    try:
        with open("/proc/stat") as stat:
            for line in stat:
                name, *fields = line.split()
                if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                    ticks = [int(f) for f in fields]
                    total += sum(ticks[:8])
                    steal += ticks[7] if len(ticks) > 7 else 0
    except OSError:
        pass
    return steal, total


class CpuReference:
    """A probe of ``cpus`` (`_probe`); `line` says what it saw since the last call."""

    def __init__(self, cpus: set[int], period_s: float = 1.0) -> None:
        self.cpus = cpus
        context = multiprocessing.get_context("spawn")
        self._receive, send = context.Pipe(duplex=False)
        self._process = context.Process(target=_probe, args=(cpus, period_s, send), daemon=True)
        self._send = send
        self._steal = steal_ticks(cpus)

    def start(self) -> None:
        self._process.start()
        self._send.close()

    def line(self) -> str:
        """The reference work's median time since the last call (µs of CPU time, with how
        many probes) and the share of those CPUs' time stolen meanwhile."""
        seen = []
        while self._receive.poll():
            seen.append(self._receive.recv())
        steal, ticks = steal_ticks(self.cpus)
        stolen = (steal - self._steal[0]) / max(ticks - self._steal[1], 1)
        self._steal = (steal, ticks)
        timed = f"{statistics.median(seen):,.0f} µs ({len(seen)} probes)" if seen else "-"
        return f"reference work {timed}, steal {100 * stolen:.1f} %"

    def stop(self) -> None:
        self._receive.close()
        self._process.terminate()
        self._process.join(5)
