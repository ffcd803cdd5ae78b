"""`pacer run`: serve, submit, follow, drain and summarize, in one command that ends by itself.

It starts ``pacer serve`` as a child process on a free loopback port, with its journal in a
temporary directory (unless given), submits jobs through the HTTP API as ``pacer submit``
would, follows them to the end, reads the service's state, drains it with SIGTERM and prints a
summary. The first Ctrl-C (or SIGTERM) drains the service and exits 128 + the signal; a second
stops it at once.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from pacer.cli.args import Progress, add_log_arguments, count, seconds
from pacer.cli.follow import follow, rate_text, span_s, wait_ready
from pacer.cli.jobs import add_job_arguments, jobs_table, submit, token
from pacer.cli.status import plural, proving_row, synthesis_rows
from pacer.cli.table import render
from pacer.client import ApiError, BlockingClient
from pacer.config import Settings

HELP = "serve, submit jobs, follow them, drain and print a summary (ends by itself)"
DESCRIPTION = """\
Run the service on this host as a child process (`pacer serve` on a free loopback port, its
journal in a temporary directory that is removed at the end), submit jobs to it through the
HTTP API, follow them with a progress line, drain the service with SIGTERM and print a summary:
jobs, partitions, time, partitions/s, how busy each GPU (or CPU proving worker) was, the
controller's estimates, the memory budget and the journal.

Settings come from PACER_* variables as for `pacer serve` (`pacer config` lists them). Exit
status: 0 when every job completed and the service drained; 1 when a job failed or the service
died (the reason is printed); 2 for bad arguments or settings. Ctrl-C drains the service and
exits 130; a second Ctrl-C stops it at once.
"""
EPILOG = """\
examples:
  pacer run                                    4 jobs of 16 partitions, the built-in workload
  pacer run --jobs 8 --partitions 64 --param log_n=18
  PACER_WORKLOAD=noop pacer run --jobs 100     the pipeline alone, no proving work
  pacer run --journal run.sqlite --log-level info
"""


QUIET_START_S = 10.0
"""How long the service may take to answer before `pacer run` says it waits (s): a start
takes a few seconds, and that is no news."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_job_arguments(parser, jobs=4, partitions=16)
    parser.add_argument(
        "--journal",
        type=Path,
        metavar="PATH",
        help="the service's journal, kept after the run (default: PACER_JOURNAL__PATH when set, "
        "else a temporary one, removed)",
    )
    parser.add_argument(
        "--port", type=count(1), metavar="N", help="loopback port to serve on (a free one)"
    )
    parser.add_argument(
        "--timeout",
        type=seconds,
        default=120.0,
        help="seconds the service may take to start (120)",
    )
    add_log_arguments(parser, default_level="warning")


class ServiceStoppedError(Exception):
    """The child service exited before its time; ``status`` is its exit status."""

    def __init__(self, status: int) -> None:
        super().__init__(_exit_text(status))
        self.status = status


class Interrupted(Exception):  # noqa: N818 - a signal, not a fault
    """The first SIGINT or SIGTERM reached ``pacer run``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _exit_text(status: int) -> str:
    if status < 0:
        return f"killed by {signal.Signals(-status).name}"
    return f"exit status {status}"


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """In the service before it runs: SIGTERM (a drain) when ``pacer run`` dies, even by
    SIGKILL, so that no service outlives its run (Linux; elsewhere nothing)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGTERM)


def spawn(args: argparse.Namespace, port: int, journal: Path) -> subprocess.Popen[bytes]:
    """``pacer serve`` in a process group of its own (a Ctrl-C in the terminal reaches only
    ``pacer run``, which drains it in order); its logs go to this process's stderr."""
    command = [sys.executable, "-m", "pacer", "serve", "--host", "127.0.0.1", "--port", str(port),
               "--log-level", args.log_level, "--log-format", args.log_format]  # fmt: skip
    env = {**os.environ, "PACER_JOURNAL__PATH": str(journal)}
    env.pop("PACER_JOURNAL__URL", None)  # the file is named by its path alone
    return subprocess.Popen(
        # preexec_fn is safe here: pacer run starts no threads.
        command, env=env, stdin=subprocess.DEVNULL, process_group=0, preexec_fn=_die_with_parent,
    )  # fmt: skip


class _Signals:
    """The first SIGINT/SIGTERM raises Interrupted; later ones go on to the service as
    SIGTERM, whose second signal stops it at once. Restores the old handlers."""

    def __init__(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child
        self.interrupted = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.interrupted:
            self.interrupted = True
            raise Interrupted(signum)
        if self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    @contextlib.contextmanager
    def installed(self) -> Iterator[_Signals]:
        old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for signum, handler in old.items():
                signal.signal(signum, handler)


def stop(child: subprocess.Popen[bytes], longest_s: float) -> int:
    """SIGTERM the service and wait for it to drain; SIGKILL if it outstays the longest its
    stop takes (`ShutdownSettings.longest_stop_s`). Its exit status."""
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
    try:
        return child.wait(longest_s + 10.0)
    except subprocess.TimeoutExpired:
        child.kill()
        return child.wait()


@dataclass(frozen=True)
class Journal:
    """The service's journal file, and whether it goes away with the run."""

    path: Path
    temporary: bool

    def __str__(self) -> str:
        return f"{self.path}{' (temporary, removed at the end)' if self.temporary else ''}"


@dataclass
class Run:
    """What a run measured, for its summary (times in s)."""

    jobs: list[dict[str, Any]]
    status: dict[str, Any]
    partitions: int
    ready_s: float
    run_s: float
    drain_s: float
    exit_status: int
    journal: Journal


def main(args: argparse.Namespace, settings: Settings) -> int:
    if settings.journal.fleet and args.journal is None:
        print("pacer run: PACER_JOURNAL__URL names a fleet's PostgreSQL database; pacer run "
              "starts one service on an SQLite journal of its own: unset it (or give "
              "--journal), or use pacer serve and pacer submit", file=sys.stderr)  # fmt: skip
        return 2
    with contextlib.ExitStack() as stack:
        if args.journal is not None:
            journal = Journal(args.journal, temporary=False)
        elif {"PACER_JOURNAL__PATH", "PACER_JOURNAL__URL"} & os.environ.keys():
            journal = Journal(settings.journal.sqlite_path, temporary=False)
        else:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="pacer-run-"))
            journal = Journal(Path(folder) / "journal.sqlite", temporary=True)
        port = args.port or free_port()
        client = BlockingClient(f"http://127.0.0.1:{port}", token(settings))
        print(f"pacer run: serving on {client.base_url}, journal {journal}", file=sys.stderr)
        child = spawn(args, port, journal.path)
        stack.callback(_reap, child)
        with _Signals(child).installed() as signals:
            status = _run(args, settings, client, signals, journal)
    return status


def _reap(child: subprocess.Popen[bytes]) -> None:
    """Never leave the service running behind (an error in pacer run itself)."""
    if child.poll() is None:
        child.kill()
        child.wait()


def _run(
    args: argparse.Namespace,
    settings: Settings,
    client: BlockingClient,
    signals: _Signals,
    journal: Journal,
) -> int:
    child = signals.child
    progress = Progress()
    drain_budget_s, longest_s = settings.shutdown.drain_s, settings.shutdown.longest_stop_s

    def alive() -> None:
        status = child.poll()
        if status is not None:
            raise ServiceStoppedError(status)

    ready = False
    try:
        ready_s = wait_ready(client, args.timeout, progress, check=alive, what="the service",
                             quiet_s=QUIET_START_S)  # fmt: skip
        ready = True
        started = time.monotonic()
        ids = submit(client, args)
        total = args.jobs * args.partitions
        jobs = follow(client, ids, total, progress, check=alive, started=started)
        run_s = span_s(jobs) or time.monotonic() - started
        status = client.status()
    except Interrupted as exc:
        progress.end()
        print(f"pacer run: {exc}: draining the service (up to {drain_budget_s:g} s for work in "
              "flight; again to stop it at once)", file=sys.stderr)  # fmt: skip
        exit_status = stop(child, longest_s)
        left = ("were in its temporary journal, now removed" if journal.temporary else
                f"stay in {journal.path}, to resume when a service starts on it")  # fmt: skip
        print(f"pacer run: interrupted; the service stopped ({_exit_text(exit_status)}); "
              f"unfinished jobs {left}", file=sys.stderr)  # fmt: skip
        return 128 + exc.signum
    except (ServiceStoppedError, ApiError) as exc:
        progress.end()
        signals.interrupted = True  # from now on a signal goes on to the service
        if child.poll() is not None:  # it died: the API could not answer
            when = "the jobs ended" if ready else "it was ready"
            print(f"pacer run: the service stopped before {when} ({_exit_text(child.wait())}); "
                  "its log above says why", file=sys.stderr)  # fmt: skip
            return 1
        exit_status = stop(child, longest_s)
        print(f"pacer run: {exc}; the service stopped ({_exit_text(exit_status)})",
              file=sys.stderr)  # fmt: skip
        return 1
    signals.interrupted = True  # a signal during the drain goes on to the service
    drain_started = time.monotonic()
    exit_status = stop(child, longest_s)
    run = Run(jobs, status, args.jobs * args.partitions, ready_s, run_s,
              time.monotonic() - drain_started, exit_status, journal)  # fmt: skip
    print(jobs_table(jobs, most=10))
    print()
    print(summary(run))
    failed = [j for j in jobs if j["state"] != "completed"]
    if failed:
        print(f"pacer run: {len(failed)} of {len(jobs)} jobs did not complete", file=sys.stderr)
        return 1
    if exit_status != 0:
        print(f"pacer run: the service did not drain cleanly ({_exit_text(exit_status)})",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


def _size(n: float) -> str:
    """``n`` bytes in the largest binary unit that keeps a digit before the point."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} bytes"


def _jobs_text(jobs: list[dict[str, Any]]) -> str:
    states = Counter(job["state"] for job in jobs)
    return ", ".join(f"{n} {state}" for state, n in sorted(states.items()))


def _busy_share(gpu: dict[str, Any], run_s: float) -> str:
    """A GPU's (or the CPU proving workers') busy share of the run."""
    return f"{min(1.0, gpu['busy_seconds'] / run_s):.0%}" if run_s > 0 else "-"


def _synthesis_share(synthesis: dict[str, Any], status: dict[str, Any], run_s: float) -> str:
    """The synthesis workers' busy share of the run: their busy time over the workers
    (syntheses at once) × the run."""
    workers = status["memory"]["caps"]["synthesis_concurrency"]
    if run_s <= 0 or workers <= 0:
        return "- busy over the run"
    return f"{min(1.0, synthesis['busy_seconds'] / (workers * run_s)):.0%} busy over the run"


def _controller_rows(c: dict[str, Any]) -> list[tuple[str, str]]:
    """The policy, its bootstraps and what it learned of the host."""
    rows = [("controller", f"{c['policy']}: {plural(c['bootstraps'], 'cold bootstrap')}, "
                           f"{plural(c['rebootstraps'], 're-bootstrap')}")]  # fmt: skip
    e = c.get("estimates") or {}
    if e.get("gpu_service_s") is not None and e.get("synthesis_s") is not None:
        rows.append(("estimates", f"GPU {e['gpu_service_s']:.3f} s, synthesis "
                                  f"{e['synthesis_s']:.3f} s a partition"))  # fmt: skip
    return rows


def _memory_rows(m: dict[str, Any]) -> list[tuple[str, str]]:
    """The budget in effect (and what was asked, when the host had less) and the caps."""
    text = f"{_size(m['budget_bytes'])} budget"
    if m.get("budget_automatic"):
        text += " (automatic: what the host gives)"
    if m.get("budget_clamped"):
        text += f" ({_size(m['configured_budget_bytes'])} configured, clamped to the host)"
    if m.get("partition_bytes"):
        text += f", {_size(m['partition_bytes'])} a partition"
    rows = [("memory", text)]
    if caps := m.get("caps"):
        rows.append(("caps", f"{caps['inflight_partitions']} partitions in flight, "
                             f"{caps['synthesis_concurrency']} syntheses at once"))  # fmt: skip
    return rows


def summary(run: Run) -> str:
    """The run in one table: what an operator asks first."""
    s = run.status
    done = sum(j["partitions_done"] for j in run.jobs)
    service = (f"ready in {run.ready_s:.1f} s; drained in {run.drain_s:.1f} s, "
               f"{_exit_text(run.exit_status)}")  # fmt: skip
    rows: list[tuple[str, str]] = [
        ("jobs", _jobs_text(run.jobs)),
        ("partitions", f"{done} of {run.partitions} done"),
        (
            "time",
            f"{run.run_s:.{2 if run.run_s < 10 else 1}f} s from the first submit to the "
            "last job's end",
        ),
        ("throughput", rate_text(done, run.run_s)),
        ("workload", s["workload"]),
        *synthesis_rows(s.get("synthesis"), lambda x: _synthesis_share(x, s, run.run_s)),
        proving_row(s, lambda g: _busy_share(g, run.run_s), " over the run"),
        *_controller_rows(s["controller"]),
        *_memory_rows(s["memory"]),
        ("service", service),
        ("journal", str(run.journal)),
    ]
    return render(("pacer run", "summary"), rows)
