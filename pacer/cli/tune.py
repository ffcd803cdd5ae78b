"""`pacer tune`: controller settings for an operator's trade, from recorded partition timings.

Reads a recording (a journal file over a window, or a CSV trace), holds out its last part,
replays the rest on the host's shape under every point of a grid of controller settings,
picks the point the goal names, and checks it against the current settings on both parts.
What it prints is an environment file: the report as comments, then the settings.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pacer.cli.args import Progress, clock_time, count, duration, share, size
from pacer.config import Settings

if TYPE_CHECKING:  # the simulator loads only when the command runs
    from pacer.plan import Plan
    from pacer.sim.replay import HostShape

HELP = "controller settings for a trade of memory against GPU idle, from recorded timings"
DESCRIPTION = """\
Replay recorded partition timings in the simulator under a grid of controller settings and
print the PACER_CONTROLLER__* settings that serve the goal, with the frontier of the trade
(mean memory in flight against GPU busy) and the tuned settings checked against the current
ones on the part of the recording tuned on and on the part held out. Standard output is an
environment file (the report as comments): pacer tune ... > tuned.env.

The recording: --journal, a pacer journal file (its completed partitions' synthesis and GPU
seconds, synthesis less its recorded wait for a worker, each arriving when its job was
accepted), over --since/--until or --last; or
--trace, a CSV file with a header naming its columns:
  synthesis_s, gpu_s   a partition's synthesis and GPU seconds (required)
  synthesis_wait_s     the part of synthesis_s spent waiting for a synthesis worker
                       (default 0; left out of the replay, whose workers queue on their own)
  arrival_s            when its job arrived, s (default 0: all waiting at the start)
  job                  a label: rows with the same job and arrival_s are one job
                       (default: one job per arrival_s)
  bytes                memory it held (3GiB); their mean is the partition size replayed
  end_s                when it finished, s: the hold-out splits by it (default: row order)
  verify_s             the seconds its proof took to check on the CPU, where it was checked
                       (default 0); a journal keeps them as the phase verify. The replay
                       holds a checked partition's memory until its check ends

The host: GPU workers, cores, threads per synthesis, the memory budget and a partition's
bytes (and, where the recording holds checks, the verify threads) from PACER_* settings, as
the service resolves them (the budget as configured, not fitted to this machine), or from
the flags below.

GPU busy is the GPUs' busy share of the time partitions waited for dispatch: idle before the
first partition is ready, after the last dispatch or between jobs is the recording's, which
no setting changes. Memory is the mean held by partitions in flight while work was
outstanding. Both are means over the seeds: seed 0 replays the recording as it is, the
others draw each job's partitions again from that job's.
"""
EPILOG = """\
the grid (--grid NAME=V1,V2,... replaces one setting's values, or adds a setting; repeat it):
  kp               2, 4, 8 (the safe range docs/controller.md gives)
  ki               0, 0.1, 0.25
  target_ready_s   0 and 1/4, 1/2, 1 of the mean synthesis time recorded
  target_ready     4 and 8 (the ready floor in partitions: half its default, and the default)
  near_balance_idle  0, 0.002 (the default) and 0.01, where the host's synthesis slots
                   finish under twice what its GPUs prove (at the recording's mean times)
  live_floor_longest  0 (the default) and 4, where the recording's 99th percentile
                   synthesis is over twice the mean (a heavy tail, partitions of several sizes)
  any other PACER_CONTROLLER__* setting by name, e.g. --grid target_ready=2,4,8

examples:
  pacer tune --journal /var/lib/pacer/journal.sqlite --last 2h --goal min-memory --min-busy 0.99
  pacer tune --trace timings.csv --workers 2 --cores 32 --goal max-busy --max-memory 40GiB \\
      --plot frontier.png > tuned.env

exit status: 0 with settings printed; 2 for bad arguments or settings, a recording that
cannot be read or holds too little, or a goal no point of the grid meets.
"""


class TuneError(Exception):
    """The host or the settings cannot be replayed as asked; the message names the flag."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    source = parser.add_argument_group("the recording (one of --journal and --trace)")
    source.add_argument("--journal", type=Path, metavar="PATH", help="a pacer journal file")
    source.add_argument(
        "--since",
        type=clock_time,
        metavar="TIME",
        help="with --journal: partitions completed from TIME (ISO 8601: "
        "2026-12-01T10:00, this host's time zone unless one is named)",
    )
    source.add_argument(
        "--until",
        type=clock_time,
        metavar="TIME",
        help="with --journal: partitions completed before TIME",
    )
    source.add_argument(
        "--last",
        type=duration,
        metavar="SPAN",
        help="with --journal: partitions completed in the last SPAN until now "
        "or --until (90s, 30m, 2h, 1d)",
    )
    source.add_argument("--trace", type=Path, metavar="FILE.csv", help="a CSV trace (above)")
    goal = parser.add_argument_group("the goal")
    goal.add_argument(
        "--goal",
        choices=("min-memory", "max-busy"),
        required=True,
        help="min-memory: least memory with the GPUs busy >= --min-busy; "
        "max-busy: busiest GPUs with memory <= --max-memory",
    )
    goal.add_argument(
        "--min-busy",
        type=share(0, 1, low_open=True),
        metavar="SHARE",
        help="with min-memory: the least GPU busy share (0.99)",
    )
    goal.add_argument(
        "--max-memory",
        type=size,
        metavar="SIZE",
        help="with max-busy: the most mean memory in flight (40GiB)",
    )
    sweep = parser.add_argument_group("the sweep")
    sweep.add_argument(
        "--holdout",
        type=share(0, 0.9),
        default=0.3,
        metavar="SHARE",
        help="hold out the partitions that ended in this last share of the "
        "recording's time: tune on the rest, then check on both (0.3; 0: none)",
    )
    sweep.add_argument(
        "--seeds",
        type=count(1),
        default=3,
        metavar="N",
        help="replays of each point: the recording, and N-1 resamples (3)",
    )
    sweep.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=V1,V2,...",
        help="sweep these values of a PACER_CONTROLLER__* setting (below)",
    )
    sweep.add_argument(
        "--parallel",
        type=count(1),
        default=1,
        metavar="N",
        help="replay N points at once, in worker processes (1)",
    )
    sweep.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="draw the frontier: mean memory in flight against GPU idle, the "
        "current and the tuned settings marked (needs matplotlib, the plot extra: "
        "pip install -e '.[plot]')",
    )
    host = parser.add_argument_group("the host (default: from the PACER_* settings)")
    host.add_argument("--workers", type=count(1), metavar="N", help="GPU workers in all")
    host.add_argument("--cores", type=count(1), metavar="N", help="cores for synthesis")
    host.add_argument(
        "--threads-per-synthesis",
        type=count(1),
        metavar="N",
        help="threads one synthesis keeps busy",
    )
    host.add_argument("--budget", type=size, metavar="SIZE", help="the memory budget (700GiB)")
    host.add_argument(
        "--partition-bytes",
        type=size,
        metavar="SIZE",
        help="what one partition holds (3GiB; a trace's bytes column else)",
    )
    host.add_argument(
        "--verify-threads",
        type=count(0),
        metavar="N",
        help="threads that check proofs on the CPU, where the recording holds checks; 0: "
        "they take turns on the synthesis workers, as where synthesis runs in threads "
        "(default: PACER_VERIFY_THREADS where the workload runs synthesis in processes, "
        "else 0)",
    )


def refusal(args: argparse.Namespace) -> str | None:
    """Why these arguments cannot go together, if they cannot."""
    if (args.journal is None) == (args.trace is None):
        return "tune needs one recording: --journal PATH or --trace FILE.csv"
    window = [f for f in ("since", "until", "last") if getattr(args, f) is not None]
    if args.trace is not None and window:
        return f"--{window[0]} chooses a window of a journal: it goes with --journal"
    if args.last is not None and args.since is not None:
        return "--last and --since both set where the window starts: choose one"
    if args.since is not None and args.until is not None and args.since >= args.until:
        return "--since must come before --until"
    if args.goal == "min-memory" and (args.min_busy is None or args.max_memory is not None):
        return "--goal min-memory takes --min-busy SHARE (and not --max-memory)"
    if args.goal == "max-busy" and (args.max_memory is None or args.min_busy is not None):
        return "--goal max-busy takes --max-memory SIZE (and not --min-busy)"
    return None


def main(args: argparse.Namespace, settings: Settings) -> int:
    """``pacer tune``: print the tuned settings; 2 (with a line saying why) for bad input."""
    from pacer.sim.plot import PlotPathError, PlotUnavailableError, check_plot_path
    from pacer.sim.recording import RecordingError
    from pacer.sim.sweep import GoalError, GridError

    refused = refusal(args)
    if refused:
        print(f"pacer: {refused}", file=sys.stderr)
        return 2
    try:
        if args.plot is not None:
            check_plot_path(args.plot)
        return _tune(args, settings)
    except (RecordingError, GridError, GoalError, TuneError, PlotPathError,
            PlotUnavailableError) as exc:  # fmt: skip
        print(f"pacer: {exc}", file=sys.stderr)
        return 2


def _tune(args: argparse.Namespace, settings: Settings) -> int:
    from pacer.sim.recording import read_journal, read_trace
    from pacer.sim.sweep import Goal, default_grid, lead_of, near_balance, parse_grid, wide_spread
    from pacer.sim.tuning import NoPointMeetsGoal, environment_file, tune

    if args.journal is not None:
        until = time.time() if args.last is not None and args.until is None else args.until
        since = args.since if args.last is None else until - args.last
        recording = read_journal(args.journal, since, until)
    else:
        recording = read_trace(args.trace)
    host = host_shape(settings, args, recording.mean_bytes, checks=recording.checks > 0)
    tuned_on, held_out = recording.split(args.holdout)
    base = default_grid(lead_of(tuned_on), near_balance(tuned_on, host), wide_spread(tuned_on))
    grid = parse_grid(args.grid, base, settings)
    goal = Goal(args.goal, args.min_busy if args.goal == "min-memory" else args.max_memory)
    if settings.controller.policy != "pi":
        print(f"pacer: PACER_CONTROLLER__POLICY={settings.controller.policy}: every point runs "
              "under it, and the gains act only under pi", file=sys.stderr)  # fmt: skip
    progress, started = Progress(), time.monotonic()

    def show(done: int, total: int) -> None:
        progress.show(f"pacer tune: {done}/{total} settings replayed, {args.seeds} seeds each, "
                      f"{time.monotonic() - started:.0f} s", final=done == total)  # fmt: skip

    try:
        tuning = tune(tuned_on, held_out, host, settings, grid, goal, args.seeds, show,
                      args.parallel)  # fmt: skip
    except NoPointMeetsGoal as exc:
        print(exc.frontier, file=sys.stderr)
        raise
    parts = f"tuned on {tuned_on.describe()}"
    if held_out is not None:
        parts += f"; held out {held_out.describe()}"
    header = [f"pacer tune: {goal.describe()}",
              f"recording: {recording.source}, {recording.describe()}",
              f"host: {host.describe(recording.checks > 0)}", parts]  # fmt: skip
    print(environment_file(tuning, header))
    if args.plot is not None:
        from pacer.sim.tune_plot import plot_frontier

        plot_frontier(tuning, args.plot, title=recording.source)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def host_shape(
    settings: Settings, args: argparse.Namespace, trace_bytes: int | None, checks: bool = False
) -> HostShape:
    """The host to replay on: the flags, else the settings as the service resolves them (the
    workload loaded where it decides: threads per synthesis, a partition's bytes, workers,
    and, where the recording holds ``checks``, whether they run on threads of their own);
    a trace's mean bytes where no flag sets them. TuneError naming the flag or setting."""
    from pydantic import ValidationError

    from pacer.config import MemorySettings, SynthesisSettings
    from pacer.sim.replay import HostShape

    synthesis = settings.synthesis.model_dump()
    memory = settings.memory.model_dump()
    flags = {"cores": args.cores, "threads_per_synthesis": args.threads_per_synthesis}
    synthesis.update({k: v for k, v in flags.items() if v is not None})
    partition_bytes = args.partition_bytes or trace_bytes
    sizes = {"budget_bytes": args.budget, "partition_bytes": partition_bytes}
    memory.update({k: v for k, v in sizes.items() if v is not None})
    try:
        settings = settings.model_copy(update={
            "synthesis": SynthesisSettings.model_validate(synthesis),
            "memory": MemorySettings.model_validate(memory),
        })  # fmt: skip
    except ValidationError as exc:
        err = exc.errors()[0]
        where = "".join(f"{part}: " for part in err["loc"])
        rule = str(err["msg"]).removeprefix("Value error, ")
        raise TuneError(f"the host: {where}{rule} (--cores, --threads-per-synthesis, --budget, "
                        "--partition-bytes, or their PACER_* settings)") from None  # fmt: skip
    threads = settings.synthesis.threads_per_synthesis
    part_bytes, workers = int(settings.memory.partition_bytes), args.workers
    budget = int(settings.memory.budget_bytes)
    verify_threads = args.verify_threads if checks else settings.verify_threads
    if workers is None or threads is None or verify_threads is None or not (part_bytes and budget):
        plan = _plan(settings)
        threads, part_bytes = plan.threads_per_synthesis, plan.partition_bytes
        workers, budget = workers or plan.workers, budget or plan.budget_bytes
        verify_threads = plan.verify_threads if verify_threads is None else verify_threads
    try:
        return HostShape(workers, settings.synthesis.cores, threads, budget, part_bytes,
                         verify_threads)  # fmt: skip
    except ValueError as exc:
        raise TuneError(f"the host: {exc}") from None


def _plan(settings: Settings) -> Plan:
    """The service's plan for ``settings`` with its workload, the budget as configured (where
    it is automatic, what this host gives)."""
    from pacer.host.memory import HostMemory
    from pacer.plan import ConfigurationError, resolve
    from pacer.workload import WorkloadError, load_workload

    try:
        workload = load_workload(settings)
    except WorkloadError as exc:
        raise TuneError(f"{exc} (or give --workers, --threads-per-synthesis, "
                        "--partition-bytes and, where the recording holds checks, "
                        "--verify-threads)") from None  # fmt: skip
    host = None
    if not settings.memory.budget_bytes:
        with contextlib.suppress(OSError, ValueError):
            host = HostMemory.read()
    try:
        return resolve(settings, workload, host)
    except ConfigurationError as exc:
        raise TuneError(f"the host: {exc}") from None
    finally:
        workload.close()
