"""`pacer submit`, `status`, `jobs` and `cancel`: the command line's side of the HTTP API,
through `pacer.client`."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from pacer.cli.args import Progress, count, param, seconds
from pacer.cli.follow import follow, wait_ready
from pacer.cli.status import print_status, seconds_text
from pacer.cli.table import clip, render
from pacer.client import TERMINAL, ApiError, BlockingClient, UnreachableError
from pacer.config import Settings
from pacer.journal import JobState

# How long a command tries a service it cannot reach before it says so, unless --timeout is
# given (s): no service at all should not cost the 30 s one starting may take (D166).
UNREACHABLE_S = 2.0
TIMEOUT_S = 30.0
START_HINT = "Start it with `pacer serve`, or pass --url (or --timeout, to wait for it to start)"
# Characters of an error a list of many shows (`pacer jobs`, a page of partitions); the rest
# is cut with an ellipsis, and `pacer status JOB` shows it whole.
ERROR_WIDTH = 60
JOBS_EPILOG = "example: pacer jobs --state failed --limit 5"


def add_job_arguments(parser: argparse.ArgumentParser, jobs: int, partitions: int) -> None:
    """What a submission says: ``--jobs``, ``--partitions``, ``--priority``, ``--param``."""
    parser.add_argument(
        "--jobs", type=count(1), default=jobs, metavar="N", help=f"jobs to submit ({jobs})"
    )
    parser.add_argument(
        "--partitions",
        type=count(1),
        default=partitions,
        metavar="K",
        help=f"partitions per job ({partitions})",
    )
    parser.add_argument("--priority", type=int, default=0, help="higher runs first (0)")
    parser.add_argument(
        "--param",
        type=param,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="workload parameter, e.g. --param log_n=18; the value is JSON, or else a string "
        "(repeatable)",
    )


def add_submit_arguments(parser: argparse.ArgumentParser) -> None:
    add_job_arguments(parser, jobs=1, partitions=8)
    parser.add_argument(
        "--wait", action="store_true", help="wait until the jobs end, with progress"
    )
    _client_args(parser)


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", nargs="?", help="a job's id: that job's state instead")
    parser.add_argument("--json", action="store_true", help="print the raw JSON")
    parser.add_argument(
        "--limit", type=count(0), default=0, metavar="N", help="with JOB: list N of its partitions"
    )
    parser.add_argument(
        "--offset", type=count(0), default=0, metavar="I", help="with JOB: from partition I (0)"
    )
    _client_args(parser)


def add_jobs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = JOBS_EPILOG
    parser.add_argument(
        "--state",
        choices=[s.value for s in JobState],
        help="only jobs in this state (default: every job)",
    )
    parser.add_argument(
        "--limit", type=count(1), default=20, metavar="N", help="the newest N jobs (20)"
    )
    parser.add_argument("--json", action="store_true", help="print the raw JSON page")
    _client_args(parser)


def add_cancel_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "job", nargs="+", metavar="JOB", help="the id of a job to cancel (one or more)"
    )
    _client_args(parser)


def _client_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        help="service address, http://HOST[:PORT] (default: from PACER_API__HOST and "
        "PACER_API__PORT)",
    )
    parser.add_argument(
        "--timeout",
        type=seconds,
        metavar="S",
        help=f"seconds to wait for the service to be ready ({TIMEOUT_S:g}); without it, one "
        f"that cannot be reached at all is given up after {UNREACHABLE_S:g} s",
    )


def service_url(host: str, port: int) -> str:
    """The address of a service listening on ``host`` and ``port``.

    >>> service_url("::1", 9470)
    'http://[::1]:9470'
    """
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def token(settings: Settings) -> str | None:
    return settings.api.token.get_secret_value() if settings.api.token else None


def run(args: argparse.Namespace, settings: Settings) -> int:
    """``pacer submit``, ``status``, ``jobs`` or ``cancel``; the exit status."""
    refused = _unused_page_arguments(args) if args.command == "status" else None
    if refused:
        print(f"pacer: {refused}", file=sys.stderr)
        return 2
    try:
        client = BlockingClient(args.url or service_url(settings.api.host, settings.api.port),
                                token(settings))  # fmt: skip
    except ValueError as exc:
        print(f"pacer: --url: {exc}", file=sys.stderr)
        return 2
    progress = Progress()
    # What the command needs of the service: ready for a write; for a read, that it answers.
    path = "/readyz" if args.command in ("submit", "cancel") else "/healthz"
    try:
        unreachable_s = UNREACHABLE_S if args.timeout is None else None
        wait_ready(client, args.timeout or TIMEOUT_S, progress, path, unreachable_s=unreachable_s)
        if args.command == "submit":
            return _submit(client, args, progress)
        if args.command == "jobs":
            return _jobs(client, args)
        if args.command == "cancel":
            return _cancel(client, args)
        if args.job:
            return _job_status(client, args)
        return print_status(client, args)
    except UnreachableError as exc:
        progress.end()
        hint = "" if exc.timed_out else f": is it running? {START_HINT}"
        print(f"pacer: {exc}{hint}", file=sys.stderr)
        return 1
    except ApiError as exc:
        progress.end()
        print(f"pacer: {exc}", file=sys.stderr)
        return 1


def _unused_page_arguments(args: argparse.Namespace) -> str | None:
    """Why ``pacer status`` refuses its page arguments, if it does: they would be ignored."""
    if args.job is None and (args.limit or args.offset):
        return "--limit and --offset page a job's partitions: give a JOB"
    if args.offset and not args.limit:
        return "--offset needs --limit (the partitions to list from it)"
    return None


def submit(client: BlockingClient, args: argparse.Namespace) -> list[str]:
    """Submit ``args.jobs`` jobs as ``args`` says; their ids."""
    params = dict(args.param)
    return [client.submit(args.partitions, params, args.priority) for _ in range(args.jobs)]


def outcome(job: dict[str, Any], most: int | None = None) -> str:
    """A job's result digest, whole, or its error: whole, or cut to ``most`` characters with
    an ellipsis."""
    error = job["error"] or ""
    return job["result_digest"] or (error if most is None else clip(error, most))


def jobs_table(jobs: list[dict[str, Any]], most: int = 20) -> str:
    """Each job's id, state, partitions and result digest (or error), whole; ``most`` of
    them."""
    rows = [(j["id"], j["state"], j["partitions"], outcome(j)) for j in jobs[:most]]
    table = render(("job", "state", "partitions", "result digest / error"), rows)
    return table + (f"\n({len(jobs) - most} more)" if len(jobs) > most else "")


def _submit(client: BlockingClient, args: argparse.Namespace, progress: Progress) -> int:
    started = time.monotonic()  # the rate counts from the first submit, as pacer run's does
    ids = submit(client, args)
    for job_id in ids:
        print(job_id)
    if not args.wait:
        return 0
    jobs = follow(client, ids, args.jobs * args.partitions, progress, started=started)
    print(jobs_table(jobs, most=len(jobs)))
    return 0 if all(j["state"] == "completed" for j in jobs) else 1


def _jobs(client: BlockingClient, args: argparse.Namespace) -> int:
    """The newest ``--limit`` jobs (in ``--state``), newest first, as a table."""
    page = client.jobs(args.state, args.limit)
    if args.json:
        import json

        print(json.dumps(page, indent=2))
        return 0
    jobs = page["jobs"]
    if not jobs:
        print(f"no {args.state} jobs" if args.state else "no jobs")
        return 0
    rows = [(j["id"], j["state"], f"{j['partitions_done']}/{j['partitions']}", j["priority"],
             j["created_at_iso"], outcome(j, ERROR_WIDTH)) for j in jobs]  # fmt: skip
    print(render(("job", "state", "done", "priority", "created (UTC)", "result digest / error"),
                 rows))  # fmt: skip
    if page["next_cursor"] is not None:
        print(f"(older jobs beyond --limit {args.limit})")
    return 0


def _cancel(client: BlockingClient, args: argparse.Namespace) -> int:
    """Cancel each job named; 1 if any could not be (unknown, or already ended)."""
    failed = 0
    for job_id in args.job:
        try:
            job = client.cancel(job_id)
        except UnreachableError:
            raise
        except ApiError as exc:
            failed += 1
            print(f"pacer: cannot cancel {job_id}: {exc.reason}", file=sys.stderr)
            continue
        print(f"{job['id']} cancelled ({job['partitions_done']} of {job['partitions']} "
              "partitions were done)")  # fmt: skip
    return 1 if failed else 0


def _job_status(client: BlockingClient, args: argparse.Namespace) -> int:
    """One job: its state, its partitions by state and first failures; with ``--limit``, a
    page of its partitions from ``--offset``."""
    job = client.job(args.job)
    page = client.partitions(args.job, args.offset, args.limit) if args.limit else None
    if args.json:
        import json

        print(json.dumps({"job": job, "page": page} if page else job, indent=2))
        return 0
    summary = job["partitions_summary"]
    # A partition without a result in an ended job was never tried, or was cut short.
    pending = "pending" if job["state"] not in TERMINAL else "not tried"
    rows: list[tuple[str, str]] = [
        ("state", job["state"] + (f": {job['error']}" if job["error"] else "")),
        ("partitions", f"{job['partitions']}: {summary['completed']} completed, "
                       f"{summary['failed']} failed, {summary['pending']} {pending}"),
        ("priority", str(job["priority"])),
        ("params", ", ".join(f"{k}={v}" for k, v in job["params"].items()) or "none"),
        *[("failed", _failure(f["index"], f["error"])) for f in summary["first_failures"]],
        ("result digest", job["result_digest"] or "-"),
    ]  # fmt: skip
    print(render(("job", job["id"]), rows))
    if page is not None:
        print()
        print(render(("partition", "state", "gpu", "synthesis s", "gpu s", "digest / error"), [
            (str(p["index"]), pending if p["state"] == "pending" else p["state"],
             "-" if p["gpu"] is None else str(p["gpu"]),
             seconds_text(p["synthesis_s"]), seconds_text(p["gpu_s"]),
             p["digest"] or clip(p["error"] or "", ERROR_WIDTH))
            for p in page["partition_results"]
        ]))  # fmt: skip
        if page["next_offset"] is not None:
            print(f"(more from --offset {page['next_offset']})")
    return 0


def _failure(index: int, error: str) -> str:
    """A failed partition's line: its index, then its error without naming it again.

    >>> _failure(1, "partition 1 failed after 3 attempts: boom")
    'partition 1 failed after 3 attempts: boom'
    >>> _failure(2, "out of GPU memory")
    'partition 2: out of GPU memory'
    """
    named = f"partition {index} "
    return error if error.startswith(named) else f"{named.rstrip()}: {error}"
