"""Dispatch policies on a GPU host, interleaved: A B C D A B C D ... in one service per size.

    python -m bench.gpu_arms [--processes 16,15,14] [--arms pi,unpaced,cuzk-default,fixed]
                             [--rounds 3] [--warmup 8] [--seconds 12] [--prime 0] [--rotate]
                             [--balanced]
                             [--log-n 27]
                             [--field goldilocks|babybear] [--devices all]

For each number of synthesis processes (``PACER_SYNTHESIS__MAX_CONCURRENT``) it starts the
service once, in-process, with the ntt workload on the GPUs and the memory budget of
``PACER_MEMORY__BUDGET_BYTES``, keeps a backlog waiting, and runs the arms in turn, ``--rounds``
times (after ``--prime`` seconds under ``unpaced``, not measured, so that the first arm does
not run on processes and pages still warming up; with ``--rotate`` each round starts one arm
further on): each arm holds dispatch, waits for the partitions in flight to finish, takes the
dispatch loop with a new policy (cold: no saved estimates), warms up, then measures for
``--seconds`` (with ``--no-drain`` the new policy takes over what is in flight, and the
warm-up absorbs it).
The pinned pool, the GPU workers and the synthesis processes stay the same for every arm, so
the arms differ only by their policy, and the order spreads any drift of the host over them.

Arms: ``pi`` (pacer's controller: a queue in front of the synthesis processes);
``pi-no-queue`` (pi with no queue: at most one synthesis a process); ``pi-no-near-balance`` (pi
with ``NEAR_BALANCE_IDLE`` 0: the setpoint not raised where synthesis keeps up barely or not at
all); ``pi-no-rate-cap`` (pi without its synthesis rate cap); ``pi-unmeasured`` (pi that does
not hear how a synthesis's time divides: its rate cap and queue from T̂syn alone, as before
D200); ``unpaced``;
``cuzk-default`` (cuzk's dispatcher, pacer off, 18 synthesis workers); ``fixed`` (cuzk's
dispatcher, pacer off, ``max_parallel_synthesis`` = the processes: a fixed concurrency tuned to
the host) at equal memory: its budget is the mean in flight of the last ``pi`` run before it,
rounded up to whole partitions; ``pi-tuned`` (pi under the settings of ``--tuned FILE``,
an environment file as `pacer tune` prints it: its ``PACER_CONTROLLER__*`` lines). Any arm's
name may end in ``-no-verify``: that arm with no verification (``PACER_VERIFY_EVERY=0``), or
in ``-shared-verify``: that arm verifying on the synthesis threads, as before D201; the others
verify as the service does.

Per run: partitions/s (counted over the window; fitted, ``slope``; and from the first proof in
it to the last, ``edge_rate``, which no window edge falling between proofs moves), GPU busy
ratio (summed over the GPUs' workers' time ÷ their number), idle gaps and their p99, memory in
flight (mean and most), the cores the service process and its synthesis processes used, and
"synthesis s" (dispatch to ready) split into the time in the synthesis processes' fill
(``compute``) and the rest (``wait``: the queue in front of the processes and the hand-offs to
them and back), and of that the queue alone (``queue``: until a synthesis thread took the
partition, as the pipeline stamps it). Then, per size and arm, what bound its runs (the GPU,
busy 0.99 of the window or more; else the synthesis threads, as busy; else neither), the mean of
the rounds with a 95 % interval (Student's t), and each arm's difference from ``pi`` and
``pi``'s memory in flight over the arm's, round by round, with their intervals; then pi's share
of each arm's partitions/s by round, from each of the four rates (``by_round``); then where the
processes idle (``bench.loop_probe.idle_table``): the synthesis threads' busy share (the
probe's, and the service's own ``pacer_synthesis_busy_seconds_total`` over the window), how
often fewer syntheses were in flight than processes, the verifications running or waiting, how
late the event loop ran, and how often pi's rate cap had no token. Each run's JSON row also
counts the verifications skipped (D201). Writes ``$OUT/gpu_arms.json`` (``--json``) after every
run when OUT is set.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from bench.gpu_service import Gaps, cpu_seconds, keep_backlog
from bench.handoff import UnmeasuredPI
from bench.loop_probe import LoopProbe, idle_table
from bench.service import quantile
from bench.stats import interval
from bench.usage import doc_parser
from gpu.workload import GpuNttWorkload
from pacer.cli.table import render
from pacer.config import ControllerSettings, Settings
from pacer.control.baselines import CuzkPacer
from pacer.control.controller import PIController
from pacer.control.policy import DispatchPolicy
from pacer.control.registry import build_policy
from pacer.server import Server
from pacer.service.lifecycle import Service

ARMS = (
    "pi",
    "pi-no-queue",
    "pi-no-near-balance",
    "pi-no-rate-cap",
    "pi-unmeasured",
    "unpaced",
    "cuzk-default",
    "fixed",
    "pi-tuned",
)
VERIFY_SUFFIXES = {"-no-verify": "none", "-shared-verify": "shared"}
"""An arm's name may end in one: the arm with no verification (``PACER_VERIFY_EVERY=0``), or
with verification on the synthesis threads, as before D201."""


def arm_parts(arm: str) -> tuple[str, str]:
    """The policy's arm and how the run verifies: "own" (its threads), "shared" or "none".

    >>> arm_parts("pi-no-verify"), arm_parts("unpaced"), arm_parts("pi-shared-verify")
    (('pi', 'none'), ('unpaced', 'own'), ('pi', 'shared'))
    """
    for suffix, verifying in VERIFY_SUFFIXES.items():
        if arm.endswith(suffix):
            return arm.removesuffix(suffix), verifying
    return arm, "own"


class UncappedPI(PIController):
    """pi without its synthesis rate cap (the token bucket), for ``pi-no-rate-cap``."""

    def _rate_cap_per_s(self) -> float:
        return math.inf


class Fills:
    """Times the workload's fills in the synthesis processes: (end, seconds) of each."""

    def __init__(self, workload: GpuNttWorkload) -> None:
        self.done: list[tuple[float, float]] = []
        fill = workload._fill

        def timed(*args: Any) -> None:
            began = time.perf_counter()
            fill(*args)
            ended = time.perf_counter()
            self.done.append((ended, ended - began))

        workload._fill = timed  # type: ignore[method-assign, assignment]

    def within(self, start: float, end: float) -> list[float]:
        return [s for at, s in self.done if start <= at <= end]


class Syntheses(Gaps):
    """The observer's synthesis times too: (when, seconds from dispatch to ready); and when
    each proof ended."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.synthesized_at: list[tuple[float, float, float]] = []
        self.proved_at: list[float] = []

    def synthesized(self, seconds: float, wait_s: float) -> None:
        self.synthesized_at.append((time.perf_counter(), seconds, wait_s))
        super().synthesized(seconds, wait_s)

    def proved(self, gpu: int, gpu_s: float, phases_s: dict[str, float]) -> None:
        self.proved_at.append(time.perf_counter())
        super().proved(gpu, gpu_s, phases_s)

    def synthesis_within(self, start: float, end: float) -> list[tuple[float, float]]:
        """(seconds from dispatch to ready, of them waiting for a synthesis thread) of each
        synthesis ready within [start, end]."""
        return [(s, w) for at, s, w in self.synthesized_at if start <= at <= end]

    def proofs_within(self, start: float, end: float) -> list[float]:
        return [at for at in self.proved_at if start <= at <= end]


def edge_rate(ends: list[float]) -> float:
    """Proofs a second from the first proof's end to the last's (``ends``: seconds, in order),
    whatever lies between the window's edges and those ends; 0 with fewer than two.

    >>> edge_rate([10.2, 10.4, 10.6, 12.2])
    1.5
    """
    if len(ends) < 2 or ends[-1] <= ends[0]:
        return 0.0
    return (len(ends) - 1) / (ends[-1] - ends[0])


def tuned_controller(text: str, base: ControllerSettings) -> ControllerSettings:
    """``base`` with the ``PACER_CONTROLLER__*`` lines of an environment file's ``text`` (as
    `pacer tune` prints it; comments and blank lines are skipped). ValueError names a line
    that is not such a setting; pydantic's ValidationError names a value out of its range.

    >>> text = "# tuned\\nPACER_CONTROLLER__KP=2\\nPACER_CONTROLLER__TARGET_READY=4\\n"
    >>> tuned = tuned_controller(text, ControllerSettings())
    >>> tuned.kp, tuned.target_ready, tuned.ki
    (2.0, 4.0, 0.1)
    >>> tuned_controller("PACER_GPU__DEVICES=0", ControllerSettings())
    Traceback (most recent call last):
    ValueError: --tuned: line 1 must read PACER_CONTROLLER__NAME=VALUE, got 'PACER_GPU__DEVICES=0'
    """
    prefix = "PACER_CONTROLLER__"
    updates: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, equals, value = line.partition("=")
        if not equals or not name.startswith(prefix):
            raise ValueError(f"--tuned: line {number} must read {prefix}NAME=VALUE, got {line!r}")
        updates[name.removeprefix(prefix).lower()] = value
    return ControllerSettings.model_validate(base.model_dump() | updates)


def make_policy(
    arm: str, server: Server, slots: int, tuned: ControllerSettings | None = None
) -> DispatchPolicy:
    service = server.service
    caps, clock, processes = (
        service.plan.caps,
        service.clock,
        service.plan.caps.synthesis_concurrency,
    )
    if arm == "pi-no-queue":
        return PIController(service.settings.controller, caps, clock, queue_sigmas=0.0)
    if arm == "pi-no-rate-cap":
        return UncappedPI(service.settings.controller, caps, clock)
    if arm == "pi-unmeasured":
        return UnmeasuredPI(service.settings.controller, caps, clock)
    if arm == "pi-no-near-balance":
        off = service.settings.controller.model_copy(update={"near_balance_idle": 0.0})
        return PIController(off, caps, clock)
    if arm == "fixed":
        return CuzkPacer(slots, clock, target=0, max_parallel_synthesis=processes)
    if arm == "pi-tuned":
        if tuned is None:
            raise ValueError("arm pi-tuned needs --tuned FILE")
        return PIController(tuned, caps, clock)
    return build_policy(arm, service.settings.controller, caps, clock)


async def swap(server: Server, policy: DispatchPolicy, budget_bytes: int, drain: bool,
               verifying: str = "own") -> float:  # fmt: skip
    """Dispatch under ``policy`` within ``budget_bytes``, verifying as ``verifying`` says
    (`arm_parts`); with ``drain``, once nothing is in flight (dispatch held meanwhile). The
    seconds the drain took."""
    p = server.service.pipeline
    began = time.perf_counter()
    p.hold(True)
    while drain and p.inflight > 0 and time.perf_counter() - began < 60:
        await asyncio.sleep(0.05)
    server.service.policy = policy
    p.controller = policy
    p.budget_bytes = budget_bytes
    verify(server, verifying)
    p.hold(False)
    return time.perf_counter() - began


def verify(server: Server, verifying: str) -> None:
    """Verify as the service does ("own"), on the synthesis threads ("shared"), or not ("none")."""
    plan, p = server.service.plan, server.service.pipeline
    p.verify_every = 0 if verifying == "none" else plan.verify_every
    p.calls.share_verification(verifying == "shared")


async def measure(args: argparse.Namespace, server: Server, arm: str, obs: Syntheses,
                  fills: Fills | None, probe: LoopProbe) -> dict[str, Any]:  # fmt: skip
    p = server.service.pipeline
    policy = server.service.policy
    warm_until = time.perf_counter() + args.warmup
    while time.perf_counter() < warm_until:
        await asyncio.sleep(0.5)
        await keep_backlog(server, args.partitions)
    started = time.perf_counter()
    proved0, busy0 = p.proved, {g: p.busy_seconds(g) for g in p.gpus}
    skipped0 = p.verifications_skipped
    worked0 = p.calls.synthesis_busy_seconds()
    cpu0 = cpu_seconds()
    inflight: list[float] = []
    dry: list[bool] = []  # pi's token bucket empty at a sample
    ticks: list[tuple[float, int]] = [(0.0, proved0)]
    while time.perf_counter() - started < args.seconds:
        await asyncio.sleep(0.1)
        ticks.append((time.perf_counter() - started, p.proved))
        inflight.append(p.inflight_bytes / 2**30)
        if isinstance(policy, PIController):
            dry.append(policy._rate.tokens < 1)
        await keep_backlog(server, args.partitions)
    ended = time.perf_counter()
    processes = server.service.plan.caps.synthesis_concurrency
    queue = policy.synthesis_queue() if isinstance(policy, PIController) else 0
    busy1, proved1 = {g: p.busy_seconds(g) for g in p.gpus}, p.proved
    worked1 = p.calls.synthesis_busy_seconds()
    elapsed = ended - started
    cpu1 = cpu_seconds()
    gaps = [s for g in p.gpus for s in obs.within(g, started, ended)]
    syn = obs.synthesis_within(started, ended)
    fill = fills.within(started, ended) if fills is not None else []
    syn_mean = statistics.fmean(s for s, _ in syn) if syn else 0.0
    queue_mean = statistics.fmean(w for _, w in syn) if syn else 0.0
    fill_mean = statistics.fmean(fill) if fill else 0.0
    return {
        "arm": arm,
        "seconds": elapsed,
        "partitions_per_s": (proved1 - proved0) / elapsed,
        "partitions_per_s_fit": slope(ticks),
        "partitions_per_s_edges": edge_rate(obs.proofs_within(started, ended)),
        "proved_ticks": [(round(t, 3), n - proved0) for t, n in ticks],
        "busy": statistics.fmean((busy1[g] - busy0[g]) / elapsed for g in p.gpus),
        "idle_gaps": len(gaps),
        "idle_gap_p99_ms": quantile(gaps, 0.99) * 1000 if gaps else 0.0,
        "inflight_gib_mean": statistics.fmean(inflight),
        "inflight_gib_max": max(inflight),
        "service_cores": (cpu1[0] - cpu0[0]) / elapsed,
        "synthesis_process_cores": (cpu1[1] - cpu0[1]) / elapsed,
        "synthesis_s": syn_mean,
        "queue_s": queue_mean,
        "compute_s": fill_mean,
        "wait_s": max(0.0, syn_mean - fill_mean),
        "tokens_dry": statistics.fmean(dry) if dry else 0.0,
        "verifications_skipped": p.verifications_skipped - skipped0,
        "service_synthesis_busy": (worked1 - worked0) / (elapsed * processes),
        "queue_allowed": queue,
    } | probe.summary(started, ended, processes, queue)


def round_order(arms: list[str], round_: int, rotate: bool, balanced: bool = False) -> list[str]:
    """The arms in the order of round ``round_`` (from 0): as given, or with ``rotate`` each
    round starting one arm further on, so that no arm always runs first after a swap. With
    ``balanced`` too, every other ``len(arms)`` rounds run the arms in reverse, so that over
    ``2 × len(arms)`` rounds of three arms each arm follows each other arm equally often.

    >>> round_order(["pi", "unpaced", "cuzk-default"], 1, rotate=True)
    ['unpaced', 'cuzk-default', 'pi']
    >>> [round_order(["a", "b", "c"], r, True, True) for r in (3, 4)]
    [['c', 'b', 'a'], ['b', 'a', 'c']]
    """
    if balanced and (round_ // len(arms)) % 2 == 1:
        arms = arms[::-1]
    shift = round_ % len(arms) if rotate or balanced else 0
    return arms[shift:] + arms[:shift]


def slope(points: list[tuple[float, int]]) -> float:
    """The least-squares slope of (seconds, partitions proved) points: partitions/s.

    Less sensitive than a count over the window to where the window's ends fall when
    syntheses finish in waves (they start together after a drain): a count gains or loses a
    whole wave by where its ends fall, a fit spreads it over the window."""
    if len(points) < 2:
        return 0.0
    return statistics.linear_regression([t for t, _ in points], [n for _, n in points]).slope


async def run_size(args: argparse.Namespace, processes: int, results: list[dict[str, Any]]) -> None:
    tmp = Path(tempfile.mkdtemp())
    settings = Settings(
        ntt={"log_n": args.log_n} | ({} if args.field is None else {"field": args.field}),
        gpu={"devices": args.devices},
        synthesis={"threads_per_synthesis": 1, "max_concurrent": processes},
        controller={"policy": "pi"},
        journal={"path": tmp / "journal.sqlite"},
        api={"port": 0},
    )
    server = Server(Service.build(settings, CollectorRegistry()))
    await server.service.open()
    obs = Syntheses(server.service.pipeline.observer)
    server.service.pipeline.observer = obs
    began = time.perf_counter()
    await server.start()
    workload = server.service.workload
    fills = Fills(workload) if isinstance(workload, GpuNttWorkload) else None  # else: no split
    probe = LoopProbe(server.service.pipeline, server.service.pipeline.calls.workload)
    probe.start()
    budget = server.service.pipeline.budget_bytes
    partition = server.service.plan.partition_bytes
    print(f"[{processes}] ready in {time.perf_counter() - began:.1f} s", file=sys.stderr)
    await keep_backlog(server, args.partitions)
    if args.prime > 0:
        unpaced = make_policy("unpaced", server, budget // partition)
        await swap(server, unpaced, budget, False)
        primed_until = time.perf_counter() + args.prime
        while time.perf_counter() < primed_until:
            await asyncio.sleep(0.5)
            await keep_backlog(server, args.partitions)
    pi_gib: float | None = None
    tuned = None if args.tuned is None else tuned_controller(
        args.tuned.read_text(), server.service.settings.controller
    )  # fmt: skip
    for round_ in range(args.rounds):
        for arm in round_order(args.arms.split(","), round_, args.rotate, args.balanced):
            slots = budget // partition
            if arm == "fixed":
                if pi_gib is None:
                    raise SystemExit("arm fixed needs a pi run before it")
                slots = max(1, math.ceil(pi_gib * 2**30 / partition - 1e-9))
            base, verifying = arm_parts(arm)
            policy = make_policy(base, server, slots, tuned)
            drain_s = await swap(server, policy, slots * partition, args.drain, verifying)
            row = await measure(args, server, arm, obs, fills, probe)
            row |= {"processes": processes, "round": round_, "drain_s": drain_s,
                    "budget_gib": slots * partition / 2**30}  # fmt: skip
            if arm == "pi":
                pi_gib = row["inflight_gib_mean"]
            results.append(row)
            print(f"[{processes}] round {round_} {arm}: {row['partitions_per_s']:.2f}/s, busy "
                  f"{row['busy']:.3f}, in flight {row['inflight_gib_mean']:.1f} GiB, synthesis "
                  f"{row['synthesis_s']:.3f} s (wait {row['wait_s']:.3f}), threads busy "
                  f"{row['thread_busy']:.3f} (service {row['service_synthesis_busy']:.3f}), "
                  f"verifying {row['verifying_mean']:.2f} (skipped "
                  f"{row['verifications_skipped']}), short "
                  f"{row['short']:.3f}, loop late p99 "
                  f"{row['loop_lag_p99_ms']:.1f} ms, tokens dry {row['tokens_dry']:.2f}",
                  file=sys.stderr)  # fmt: skip
            save(results, args.json)
    server.service.pipeline.hold(True)
    await probe.stop()
    await server.shutdown()


def save(results: list[dict[str, Any]], name: str = "gpu_arms.json") -> None:
    out = os.environ.get("OUT")
    if out:
        Path(out, name).write_text(json.dumps(results, indent=2))


THREE_DIGITS = ("busy", "synthesis_s", "queue_s", "wait_s", "compute_s")  # in `summary`
BOUND_AT = 0.99  # a busy share from which the GPU, or the synthesis processes, bound a run


def bound(run: dict[str, Any]) -> str:
    """What bound a run's throughput: ``gpu`` where the GPU was busy ``BOUND_AT`` of the
    window or more, else ``synthesis`` where the synthesis threads were, else ``neither`` (a
    policy left both waiting); ``-`` for a run saved before the probe.

    >>> bound({"busy": 0.995, "thread_busy": 0.93}), bound({"busy": 0.95, "thread_busy": 1.0})
    ('gpu', 'synthesis')
    >>> bound({"busy": 0.95, "thread_busy": 0.9}), bound({"busy": 0.95})
    ('neither', '-')
    """
    if run["busy"] >= BOUND_AT:
        return "gpu"
    if "thread_busy" not in run:
        return "-"
    return "synthesis" if run["thread_busy"] >= BOUND_AT else "neither"


def bounds(runs: list[dict[str, Any]]) -> str:
    """How many of ``runs`` each `bound` held, the most first.

    >>> bounds([{"busy": 1.0}, {"busy": 0.9, "thread_busy": 1.0}, {"busy": 0.999}])
    'gpu 2, synthesis 1'
    """
    counts = collections.Counter(bound(run) for run in runs)
    return ", ".join(f"{name} {n}" for name, n in counts.most_common())


def summary(results: list[dict[str, Any]], markdown: bool = False) -> str:
    """Per size and arm: what bound its runs (`bounds`); the mean over the rounds ± the 95 %
    half-width; the difference in partitions/s from pi of the same round, and pi's mean in
    flight over this arm's of the same round, each with its interval."""
    rows = []
    keys = ("partitions_per_s", "busy", "inflight_gib_mean", "synthesis_s", "queue_s", "wait_s",
            "compute_s", "service_cores", "synthesis_process_cores", "idle_gap_p99_ms")  # fmt: skip
    sizes = sorted({r["processes"] for r in results}, reverse=True)
    for n in sizes:
        arms = list(dict.fromkeys(r["arm"] for r in results if r["processes"] == n))
        pi = {r["round"]: r for r in results if r["processes"] == n and r["arm"] == "pi"}
        for arm in arms:
            runs = [r for r in results if r["processes"] == n and r["arm"] == arm]
            cells = []
            for key in keys:
                if any(key not in r for r in runs):  # a file saved before the bench kept it
                    cells.append("-")
                    continue
                mean, half = interval([r[key] for r in runs])
                digits = 3 if key in THREE_DIGITS else 2
                if key == "idle_gap_p99_ms":
                    digits = 0
                cells.append(f"{mean:.{digits}f} ± {half:.{digits}f}")
            diffs = [r["partitions_per_s"] - pi[r["round"]]["partitions_per_s"]
                     for r in runs if r["round"] in pi]  # fmt: skip
            memory = [pi[r["round"]]["inflight_gib_mean"] / r["inflight_gib_mean"]
                      for r in runs if r["round"] in pi and r["inflight_gib_mean"] > 0]  # fmt: skip
            if arm == "pi" or not diffs:
                versus = memory_ratio = "-"
            else:
                mean, half = interval(diffs)
                verdict = "tie" if abs(mean) <= half else ("pi ahead" if mean < 0 else "pi behind")
                versus = f"{mean:+.2f} ± {half:.2f} ({verdict})"
                mean, half = interval(memory)
                memory_ratio = f"{mean:.3f} ± {half:.3f}"
            rows.append((n, arm, len(runs), bounds(runs), *cells, versus, memory_ratio))
    headers = ("processes", "arm", "runs", "bound by", "partitions/s", "busy", "in flight GiB",
               "synthesis s", "queue s", "wait s", "compute s", "service cores", "synthesis cores",
               "gap p99 ms", "partitions/s − pi's", "pi's in flight ÷ this")  # fmt: skip
    return render(headers, rows, markdown=markdown)


RATES = (
    ("partitions_per_s", "count"),
    ("partitions_per_s_fit", "fit"),
    ("partitions_per_s_edges", "first to last"),
    ("processes_use", "per compute second"),
)


def rate(run: dict[str, Any], key: str) -> float:
    """``run[key]``, or for ``processes_use`` the partitions a second per process and second
    of a synthesis's compute (partitions/s × compute s ÷ processes): 1 where every process is
    always at work. A host whose syntheses run slower for a while (another tenant, a cooler
    clock) moves every arm's partitions/s with it, but not this share; 0 where not recorded.
    It tells policies apart only where synthesis bounds: where the GPU bounds, the processes
    wait for it under every policy, and the share follows the GPU's pace instead.

    >>> rate({"partitions_per_s": 6.0, "compute_s": 0.9, "processes": 6}, "processes_use")
    0.9
    >>> rate({"partitions_per_s": 6.0, "processes": 6}, "processes_use")
    0.0
    """
    if key != "processes_use":
        return float(run.get(key, 0.0))
    if "compute_s" not in run:
        return 0.0
    return float(run["partitions_per_s"] * run["compute_s"] / run["processes"])


def by_round(results: list[dict[str, Any]], markdown: bool = False) -> str:
    """Per size and arm other than pi: pi's partitions/s ÷ the arm's of the same round − 1,
    round by round and as a mean with its 95 % interval, from the count over the window, the
    least-squares fit (``slope``), the proofs from the first to the last (``edge_rate``) and
    per second of the processes' compute (``rate``)."""
    rows = []
    for n in sorted({r["processes"] for r in results}, reverse=True):
        pi = {r["round"]: r for r in results if r["processes"] == n and r["arm"] == "pi"}
        arms = dict.fromkeys(r["arm"] for r in results if r["processes"] == n and r["arm"] != "pi")
        for arm in arms:
            for key, source in RATES:
                runs = [r for r in results if r["processes"] == n and r["arm"] == arm
                        and r["round"] in pi and rate(r, key) > 0]  # fmt: skip
                shares = [rate(pi[r["round"]], key) / rate(r, key) - 1 for r in runs]
                if not shares:
                    continue
                mean, half = interval(shares)
                rows.append((n, arm, source, ", ".join(f"{100 * x:+.1f}" for x in shares),
                             f"{100 * mean:+.1f} ± {100 * half:.1f} %"))  # fmt: skip
    headers = ("processes", "arm", "rate from", "pi ÷ arm − 1 by round, %", "mean")
    return render(headers, rows, markdown=markdown)


def pooled(files: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The runs of several saved files as one series: each file's rounds numbered after the
    last round of the files before it, per size.

    >>> first = [{"processes": 6, "round": 0}, {"processes": 6, "round": 1}]
    >>> [r["round"] for r in pooled([first, [{"processes": 6, "round": 0}]])]
    [0, 1, 2]
    """
    out: list[dict[str, Any]] = []
    for runs in files:
        after = {n: 1 + max(r["round"] for r in out if r["processes"] == n)
                 for n in {r["processes"] for r in out}}  # fmt: skip
        out += [{**r, "round": r["round"] + after.get(r["processes"], 0)} for r in runs]
    return out


def report(results: list[dict[str, Any]], markdown: bool) -> str:
    """The three tables: `summary`, `by_round` and where the processes idle (`idle_table`)."""
    tables = (summary, by_round, idle_table)
    return "\n\n".join(table(results, markdown) for table in tables)


def main() -> int:
    parser = doc_parser(__doc__)
    parser.add_argument("--processes", default="16,15,14", help="synthesis processes, per size")
    arms_help = ("comma-separated, in the order of a round: " + ", ".join(ARMS)
                 + "; each may end in " + " or ".join(VERIFY_SUFFIXES))  # fmt: skip
    parser.add_argument("--arms", default="pi,unpaced,cuzk-default,fixed", help=arms_help)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each arm, interleaved")
    parser.add_argument("--warmup", type=float, default=8.0, help="after a swap (s)")
    parser.add_argument("--seconds", type=float, default=12.0, help="measured window (s)")
    prime_help = "before the first round, under unpaced, not measured (s)"
    rotate_help = "start each round one arm further on (fixed takes the last pi run's memory)"
    parser.add_argument("--prime", type=float, default=0.0, help=prime_help)
    parser.add_argument("--rotate", action="store_true", help=rotate_help)
    balanced_help = (
        "rotate, and every other len(arms) rounds in reverse: each arm follows "
        "each other equally often over 2 × len(arms) rounds of three arms"
    )
    parser.add_argument("--balanced", action="store_true", help=balanced_help)
    parser.add_argument("--partitions", type=int, default=64, help="partitions per job")
    parser.add_argument("--log-n", type=int, default=27, help="partition size")
    parser.add_argument("--field", choices=("babybear", "goldilocks"), default=None)
    parser.add_argument("--devices", default="all", help="PACER_GPU__DEVICES")
    parser.add_argument("--drain", action=argparse.BooleanOptionalAction, default=True,
                        help="before each arm, wait until nothing is in flight")  # fmt: skip
    tuned_help = "arm pi-tuned's settings: an environment file as `pacer tune` prints it"
    parser.add_argument("--tuned", type=Path, default=None, help=tuned_help)
    parser.add_argument("--json", default="gpu_arms.json", help="file name under $OUT")
    parser.add_argument("--markdown", action="store_true", help="the summary as Markdown")
    parser.add_argument("--summary", type=Path, nargs="+",
                        help="print the summary of saved JSON files only (the rounds of each "
                        "file after those of the one before)")  # fmt: skip
    args = parser.parse_args()
    if args.summary is not None:
        print(report(pooled(json.loads(path.read_text()) for path in args.summary),
                     args.markdown))  # fmt: skip
        return 0
    unknown = {arm for arm in args.arms.split(",") if arm_parts(arm)[0] not in ARMS}
    if unknown:
        parser.error(f"--arms: unknown {', '.join(sorted(unknown))}; known: {', '.join(ARMS)}")
    if args.tuned is not None:
        try:
            tuned_controller(args.tuned.read_text(), ControllerSettings())
        except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            parser.error(f"--tuned {args.tuned}: {exc}")
    elif any(arm_parts(arm)[0] == "pi-tuned" for arm in args.arms.split(",")):
        parser.error("--arms: pi-tuned needs --tuned FILE")
    import uvloop

    results: list[dict[str, Any]] = []
    for processes in (int(n) for n in args.processes.split(",")):
        uvloop.run(run_size(args, processes, results))
    print(report(results, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
