"""`pacer settle` on the command line: options, the scope judged, the summary line."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from gpu.procs.lifeline import SYNTHESIS_PROCESS_NAME
from gpu.shm.blocks import SHM_DIR
from pacer.host.memory import HOST_FILES, HostFiles
from pacer.settle.detector import (
    DEFAULT_INTERVAL_S,
    DEFAULT_PROCESS_NAME,
    DEFAULT_STATE_FILE,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TOLERANCE,
    DEFAULT_WINDOW_S,
    PROGRESS_EVERY_S,
    parse_size,
)
from pacer.settle.held import HeldBlockScanner, ReportedHolders
from pacer.settle.loop import Result, SettleOptions, replay, run
from pacer.settle.report import summary
from pacer.settle.scope import HOST, SCOPE_RULE, Scope, other_bound, parse_scope, resolve_scope
from pacer.settle.sources import (
    CgroupSampler,
    MeminfoSampler,
    NvmlMemory,
    ProcessScanner,
    ReplayError,
    Sampler,
    SamplingError,
    StaleBlocksRemoved,
    no_processes,
    read_replay,
)
from pacer.settle.state import default_state_file, record_state, with_baselines

HELP = "wait until memory has settled after a previous pacer died (systemd ExecStartPre=)"
DESCRIPTION = """\
Wait until memory has settled after a previous instance died, then exit 0; exit 1 at
--timeout. The memory judged (--scope, default auto) is, where a cgroup v2 memory.max limits
this process (a pod's limit, a unit's MemoryMax=, a slice's; of its cgroup and the ancestors,
the one whose limit leaves the least room, as pacer serve finds it), that cgroup's
memory.current (page cache and shared memory charged to it included): what the next pacer
there is bounded by. Elsewhere it is the host's used memory, MemTotal - MemAvailable from
/proc/meminfo (`free`'s "used", with reclaimable caches left out). Settled means all of:
  - used <= baseline + tolerance, or used memory changed by less than the tolerance over the
    last --window seconds (max - min of the samples, over a whole window);
  - no pacer service is left, alive or zombie: a process named --process-name running serve;
  - no process maps a pinned-pool block of a pacer that is gone (a synthesis process that
    outlived its service, say): such memory stays held, however flat used memory is, until
    that process ends. A pacer is gone when no live process matches the identity it wrote
    beside its blocks (its PID in its own PID namespace, that namespace, its start time, the
    boot), not merely when its PID is free. Each such process is named with its PID, command
    line (on one line, cut) and resident bytes; --kill-orphans kills those that are pacer's
    synthesis processes (named pacer-synth), never another program's.
A pinned pool kept for the next pacer (PACER_GPU__KEEP_POOL: its owner record beside its
blocks in --shm-dir, the blocks there or in systemd's descriptor store) is memory held on
purpose: it is reported as "kept for the next pacer", left out of used memory when judging,
and left in place (--drop-kept removes it). Its pages are charged to the cgroup that first
wrote them, which after a restart may not be the one judged: of a cgroup's memory.current,
at most its shared memory (memory.stat's shmem) counts as the kept pool.
With NVML (pip install nvidia-ml-py) and a GPU, GPU used memory is sampled too and must
settle by the same rules, against the GPU level remembered in the state file.
Pinned-pool blocks that a killed pacer left in --shm-dir (pacer-pool-<pid>-<n>, its process
gone, no owner record keeping them) never come back by themselves, nor do owner records whose
blocks are gone: each sample removes them first, and says so.
On a settled exit the used level is remembered in the state file as the next baseline, with
the scope it is of; a remembered baseline of another scope is not used. Where the memory not
judged would bound the next pacer more (the host's MemAvailable below the cgroup's room, or
the reverse), a warning says so."""
EPILOG = """\
exit status: 0 settled, 1 not settled at --timeout, 2 bad options or replay file.

examples:
  pacer settle --baseline 230GiB             # until back at 230 GiB (+2 GiB), or stable
  pacer settle --timeout 0 --baseline 230GiB # check once, now
  pacer settle --json > drain.json           # keep every sample for later
  pacer settle --replay drain.csv            # judge a recorded series (t_s,used_bytes)
  pacer settle --kill-orphans                # kill synthesis processes a dead pacer left
  pacer settle --drop-kept                   # free a pool kept for the next pacer too
  pacer settle --shm-dir /dev/shm/pacer      # the pool of a pacer with PACER_GPU__SHM_DIR set
  pacer settle --scope host                  # the host, even inside a memory-limited cgroup

  in the unit file (TimeoutStartSec= also bounds ExecStartPre=, and is 90 s by default;
  with MemoryMax= set, settle judges the unit's cgroup):
    StateDirectory=pacer
    ExecStartPre=/usr/bin/pacer settle --timeout 900
    TimeoutStartSec=960
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``pacer settle`` options to ``parser`` (and its description and examples
    where it has none)."""
    parser.description = parser.description or DESCRIPTION
    parser.epilog = parser.epilog or EPILOG
    if parser.formatter_class is argparse.HelpFormatter:
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--baseline",
        metavar="SIZE",
        help="the memory judged, at rest, e.g. 230GiB: the host's used memory as `free` shows "
        "it, or the cgroup's memory.current with no pacer running (default: the level "
        "remembered at the last settled start, of the same scope; none the first time: "
        "stability only)",
    )
    parser.add_argument(
        "--scope",
        metavar="{auto,host,cgroup}",
        default="auto",
        help=f"the memory judged: {SCOPE_RULE}; cgroup where no memory.max limits this process "
        "is an error (default: auto)",
    )
    parser.add_argument(
        "--tolerance",
        metavar="SIZE",
        default=DEFAULT_TOLERANCE,
        help="how close to the baseline counts as back, and how little change over the window "
        "counts as stable; above the host's background wander, far below the drain rate "
        f"(default: {DEFAULT_TOLERANCE})",
    )
    parser.add_argument(
        "--window",
        metavar="SECONDS",
        default=str(DEFAULT_WINDOW_S),
        help="how long used memory must stay within the tolerance to count as stable; long "
        f"enough to bridge pauses in the drain (default: {DEFAULT_WINDOW_S:g})",
    )
    parser.add_argument(
        "--interval",
        metavar="SECONDS",
        default=str(DEFAULT_INTERVAL_S),
        help=f"time between two samples (default: {DEFAULT_INTERVAL_S:g})",
    )
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        default=str(DEFAULT_TIMEOUT_S),
        help="give up and exit 1 after this long; 0 checks once; keep systemd's "
        f"TimeoutStartSec= above it (default: {DEFAULT_TIMEOUT_S:g}, 15 minutes)",
    )
    parser.add_argument(
        "--process-name",
        metavar="NAME",
        default=DEFAULT_PROCESS_NAME,
        help="wait while a pacer service, a process of this kernel name (as `ps -o comm` shows "
        "it, first 15 characters) with serve on its command line, is alive or a zombie; this "
        f"command and its ancestors excepted; '' skips the check (default: "
        f"{DEFAULT_PROCESS_NAME})",
    )
    parser.add_argument(
        "--kill-orphans",
        action="store_true",
        help="SIGKILL the processes that map a dead pacer's pool blocks, when they are pacer's "
        f"synthesis processes (named {SYNTHESIS_PROCESS_NAME}, or children of multiprocessing's "
        "forkserver); any other holder is only named (default: name them all, kill none)",
    )
    parser.add_argument(
        "--drop-kept",
        action="store_true",
        help="remove pinned pools kept for the next pacer too (default: keep them, reported "
        "as such and left out of used memory)",
    )
    parser.add_argument(
        "--shm-dir",
        metavar="DIR",
        help="the tmpfs directory of the pinned pools' blocks and owner records, as pacer "
        "serve's PACER_GPU__SHM_DIR names it: swept, surveyed for kept pools, and searched for "
        f"orphans' mappings (default: PACER_GPU__SHM_DIR where set, else {SHM_DIR})",
    )
    parser.add_argument(
        "--state-file",
        metavar="PATH",
        type=Path,
        help="where the baseline is remembered (default: $STATE_DIRECTORY/settle.json under "
        f"systemd's StateDirectory=, else {DEFAULT_STATE_FILE}; with --replay: none)",
    )
    parser.add_argument(
        "--no-record",
        action="store_true",
        help="do not remember the settled level as the next baseline",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object instead: settled, settled_at_s, reason, samples, and, when "
        "sampling this host, held_by_orphans (held_bytes, processes) and scope (host or cgroup; "
        "cgroup_path and cgroup_max_bytes with the latter)",
    )
    parser.add_argument(
        "--replay",
        metavar="FILE.csv",
        type=Path,
        help="judge a recorded series (header row with columns t_s and used_bytes) on its own "
        "timing, instead of sampling this host; no process check, --interval unused, no "
        "--scope cgroup (a baseline from --state-file must be the host's)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help=f"print used memory and its trend every {PROGRESS_EVERY_S:g} s to stderr (the "
        "default when stderr is a terminal; never with --json)",
    )


def _seconds(text: str, option: str, allow_zero: bool = False) -> float:
    rule = ">= 0" if allow_zero else "> 0"
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and (value > 0 or (allow_zero and value == 0))):
        raise ValueError(f"{option}: {text!r} is not a number of seconds {rule}")
    return value


def _options(args: argparse.Namespace) -> SettleOptions:
    tolerance = _size(args.tolerance, "--tolerance")
    if tolerance <= 0:
        raise ValueError(f"--tolerance: must be more than 0 bytes, got {args.tolerance!r}")
    return SettleOptions(
        tolerance_bytes=tolerance,
        window_s=_seconds(args.window, "--window"),
        interval_s=_seconds(args.interval, "--interval"),
        timeout_s=_seconds(args.timeout, "--timeout", allow_zero=True),
        baseline_bytes=None if args.baseline is None else _size(args.baseline, "--baseline"),
    )


def _size(text: str, option: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise ValueError(f"{option}: {exc}") from None


def shm_dir(option: str | None, environ: Mapping[str, str]) -> str:
    """The directory of the pools' blocks and records: ``--shm-dir``, else PACER_GPU__SHM_DIR
    where set, else /dev/shm. ValueError where it is not an absolute path.

    >>> shm_dir(None, {"PACER_GPU__SHM_DIR": "/dev/shm/pacer/"}), shm_dir(None, {})
    ('/dev/shm/pacer', '/dev/shm')
    """
    if option is not None:
        name, value = "--shm-dir", option
    else:
        name, value = "PACER_GPU__SHM_DIR", environ.get("PACER_GPU__SHM_DIR") or SHM_DIR
    if not os.path.isabs(value):
        raise ValueError(f"{name}: must be an absolute path, such as {SHM_DIR}, got {value!r}")
    return os.path.normpath(value)


def _warn(message: str) -> None:
    print(f"pacer settle: {message}", file=sys.stderr, flush=True)


def _run_host(
    args: argparse.Namespace,
    options: SettleOptions,
    scope: Scope,
    files: HostFiles,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    progress: Callable[[str], None] | None,
    directory: str,
) -> Result:
    processes = ProcessScanner(args.process_name) if args.process_name else no_processes
    held = ReportedHolders(HeldBlockScanner(directory=directory), _warn, args.kill_orphans)
    gpu = NvmlMemory.open()
    try:
        memory: Sampler = MeminfoSampler(files.meminfo, gpu)
        if scope.cgroup is not None:
            memory = CgroupSampler(scope.cgroup, files.cgroup_root, gpu)
        sampler = StaleBlocksRemoved(
            memory, _warn, args.drop_kept, files.meminfo, directory=directory
        )
        return run(options, clock, sleep, sampler, processes, progress, held)
    finally:
        if gpu is not None:
            gpu.close()


def _scope(args: argparse.Namespace, files: HostFiles) -> Scope | None:
    """The memory this run judges; None for a replay, whose recorded memory is judged as the
    host's. ValueError naming the option and the rule."""
    if args.replay is None:
        return resolve_scope(args.scope, files)
    if parse_scope(args.scope) == "cgroup":
        raise ValueError(
            "--scope cgroup: not with --replay, which judges the recorded used_bytes, not this "
            "process's cgroup; a replay's baseline is the host's"
        )
    return None


def main(
    args: argparse.Namespace,
    files: HostFiles = HOST_FILES,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Run ``pacer settle`` with parsed ``args``; prints, and returns the exit status.
    ``files``: where the host's and this process's cgroup's memory is read; ``clock`` and
    ``sleep`` pace the sampling of this host."""
    try:
        options = _options(args)
        scope = _scope(args, files)
        directory = shm_dir(args.shm_dir, os.environ)
    except ValueError as exc:
        _warn(str(exc))
        return 2
    # A replay judges another time, maybe another host: the host's state only when asked.
    state_file: Path | None = args.state_file
    if state_file is None and args.replay is None:
        state_file = default_state_file()
    if state_file is not None:
        options = with_baselines(options, state_file, scope or HOST, _warn)
    progress = _warn if not args.json and (args.verbose or sys.stderr.isatty()) else None
    replay_ended = False
    try:
        if scope is None:
            series = read_replay(args.replay)
            replay_ended = series[-1].t_s < options.timeout_s
            result = replay(series, options, progress)
        else:
            if progress is not None:
                progress(scope.judging())
            result = _run_host(args, options, scope, files, clock, sleep, progress, directory)
    except (ReplayError, SamplingError) as exc:
        _warn(str(exc))
        return 2
    if scope is not None and (bound := other_bound(scope, files)) is not None:
        _warn(bound)
    if args.json:
        print(json.dumps(result.as_json() | ({} if scope is None else scope.as_json())))
    else:
        print(summary(result, options, replay_ended, scope))
    if result.settled and state_file is not None and not args.no_record:
        try:
            record_state(state_file, result, scope or HOST)
        except OSError as exc:
            _warn(f"cannot remember the baseline in {state_file}: {exc}")
    return 0 if result.settled else 1
