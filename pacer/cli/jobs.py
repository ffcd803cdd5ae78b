"""`pacer submit` and `pacer status`: the command line's side of the HTTP API."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from pacer.cli.args import Progress, count, param, seconds
from pacer.cli.follow import TERMINAL, follow, wait_ready
from pacer.cli.http_client import ApiError, Client
from pacer.cli.table import render
from pacer.config import Settings

JOBS_NOT_KNOWN = "not known: a journal call hangs"


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


def _client_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        help="service address, http://HOST[:PORT] (default: from PACER_API__HOST and "
        "PACER_API__PORT)",
    )
    parser.add_argument(
        "--timeout", type=seconds, default=30.0, help="seconds to wait for the service (30)"
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
    refused = _unused_page_arguments(args) if args.command == "status" else None
    if refused:
        print(f"pacer: {refused}", file=sys.stderr)
        return 2
    try:
        client = Client(args.url or service_url(settings.api.host, settings.api.port),
                        token(settings))  # fmt: skip
    except ValueError as exc:
        print(f"pacer: --url: {exc}", file=sys.stderr)
        return 2
    progress = Progress()
    try:
        if args.command == "submit":
            wait_ready(client, args.timeout, progress)
            return _submit(client, args, progress)
        # The status of a service not ready, too.
        wait_ready(client, args.timeout, progress, "/healthz")
        if args.job:
            return _job_status(client, args)
        return _status(client, args)
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


def submit(client: Client, args: argparse.Namespace) -> list[str]:
    """Submit ``args.jobs`` jobs as ``args`` says; their ids."""
    params = dict(args.param)
    return [client.submit(args.partitions, params, args.priority) for _ in range(args.jobs)]


def jobs_table(jobs: list[dict[str, Any]], most: int = 20) -> str:
    """Each job's id, state, partitions and result digest (or error); ``most`` of them."""
    rows = [(j["id"], j["state"], j["partitions"],
             j["result_digest"][:40] if j["result_digest"] else j["error"] or "")
            for j in jobs[:most]]  # fmt: skip
    table = render(("job", "state", "partitions", "result digest / error"), rows)
    return table + (f"\n({len(jobs) - most} more)" if len(jobs) > most else "")


def _submit(client: Client, args: argparse.Namespace, progress: Progress) -> int:
    started = time.monotonic()  # the rate counts from the first submit, as pacer run's does
    ids = submit(client, args)
    for job_id in ids:
        print(job_id)
    if not args.wait:
        return 0
    jobs = follow(client, ids, args.jobs * args.partitions, progress, started=started)
    print(jobs_table(jobs, most=len(jobs)))
    return 0 if all(j["state"] == "completed" for j in jobs) else 1


def _job_status(client: Client, args: argparse.Namespace) -> int:
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
             _seconds(p["synthesis_s"]), _seconds(p["gpu_s"]),
             (p["digest"] or p["error"] or "")[:40])
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


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _controller_rows(c: dict[str, Any]) -> list[tuple[str, str]]:
    """The PI controller's mode and terms; a baseline's name, mode and interval."""
    if "terms" not in c:
        return [("policy", f"{c['policy']} (baseline): {c['mode']}, interval "
                           f"{_seconds(c['interval_s'])} s")]  # fmt: skip
    t = c["terms"]
    return [
        ("policy", c["policy"]),
        ("controller", f"{t['mode']}: interval {t['interval_s']:.3f} s, projected ready "
                       f"{t['projected_ready']:.1f} / setpoint {t['setpoint']:.1f}"),
        ("terms", f"P {t['p_term']:+.3f}  I {t['i_term']:+.3f}  feed-forward "
                  f"{t['ff_interval_s']:.3f} s"),
    ]  # fmt: skip


def _backend(pool: dict[str, Any]) -> str:
    """How the slots are held, as the pool names it (absent from older services)."""
    names = {"cuda": "cudaHostAlloc", "shared-cuda": "shared memory, cudaHostRegister",
             "shared": "shared memory", "numpy": "pageable"}  # fmt: skip
    backend = pool.get("backend")
    return f", {names.get(backend, backend)}" if backend else ""


def _pool_rows(pool: dict[str, Any]) -> list[tuple[str, str]]:
    """The pinned pool, when the workload has one."""
    if not pool.get("slots_total"):
        return []
    return [(
        "pinned pool",
        f"{pool['slots_free']} / {pool['slots_total']} slots free "
        f"({pool['total_bytes'] / 2**30:.1f} GiB{_backend(pool)}); {pool['waits']} waits, "
        f"{pool['fallbacks']} fallbacks, {pool['allocations_after_warmup']} allocations after "
        "warm-up",
    )]  # fmt: skip


def journal_rows(journal: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Whether the journal takes writes (if not, since when, why, and what waits for it), and
    each call on it that has run past its limit without returning."""
    if not journal:  # a service from before this field
        return []
    hung = "; ".join(
        f"HUNG: call {call['call']} running for {call['running_s']:.0f} s"
        for call in journal.get("calls", [])
        if call["running_s"] >= journal["stall_s"]
    )
    if journal["healthy"]:
        return [("journal", hung or "ok")]
    held = ", dispatch held" if journal["dispatch_held"] else ""
    return [(
        "journal",
        f"FAILING for {journal['failing_s']:.0f} s: {journal['error']}; "
        f"{journal['uncommitted_results']} results wait in memory{held}"
        + (f"; {hung}" if hung else ""),
    )]  # fmt: skip


def fleet_rows(fleet: dict[str, Any] | None) -> list[tuple[str, str]]:
    """A host of a fleet: its name and leases, and the fleet's partitions left and hosts
    holding leases; nothing for a service on its own journal."""
    if not fleet:
        return []
    here = (
        f"host {fleet['host']}: {fleet['leases']} leases ({fleet['leased_partitions']} "
        f"partitions), {fleet['reclaimed_partitions']} partitions reclaimed; "
    )
    if fleet["hosts"] is None:  # a journal call hangs: the fleet's part is not known
        return [("fleet", here + "the rest of the fleet not known: a journal call hangs")]
    hosts = ", ".join(f"{h['host']} {h['partitions']}" for h in fleet["hosts"]) or "none"
    return [(
        "fleet",
        here + f"{fleet['pending_partitions']} partitions left fleet-wide; leases held by {hosts}",
    )]  # fmt: skip


def engine_rows(engines: list[dict[str, Any]] | None) -> list[tuple[str, str]]:
    """Each engine session: connected or waiting, its controller's mode, what it has in flight
    against its budget, its backlog and its events (those refused counted)."""
    rows = []
    for e in engines or []:
        state = "connected" if e["connected"] else "waiting to resume"
        held = f"{e['inflight_bytes'] / 2**30:.2f} / {e['memory_budget_bytes'] / 2**30:.1f} GiB"
        refused = sum(e["errors"].values())
        rows.append((f"engine {e['engine']}", f"{state}, {e['mode']}, {e['inflight']} in flight "
                     f"({held}), backlog {e['backlog']}, {e['events']} events ({refused} "
                     "refused)"))  # fmt: skip
    return rows


def proving_row(
    status: dict[str, Any], busy: Callable[[dict[str, Any]], str], span: str = ""
) -> tuple[str, str]:
    """Each GPU's busy share (``busy(gpu)``, as ``95%``) and workers; where the host proves on
    the CPU (no GPU model in the plan), its proving workers instead: no GPU index to show.
    ``span``: what the shares are of (`` over the run``)."""
    gpus = status["gpus"]
    if (status.get("plan") or {}).get("gpu_model") == "none":
        workers = sum(g["workers"] for g in gpus)
        shares = ", ".join(busy(g) for g in gpus)
        return ("workers", f"{plural(workers, 'worker')} proving on the CPU, {shares} busy{span}")
    shares = ", ".join(f"{g['gpu']}: {busy(g)} busy ({plural(g['workers'], 'worker')})"
                       for g in gpus)  # fmt: skip
    return ("gpus", shares + span)


def plural(n: int, word: str) -> str:
    """``n`` and ``word``, plural unless one: ``plural(2, "worker")`` → '2 workers'."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def synthesis_rows(synthesis: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Where synthesis runs, how it computes, and how often its processes had to be replaced."""
    if not synthesis:  # a service from before this field
        return []
    text = synthesis["executor"]
    if synthesis.get("kernel"):
        text += f", {synthesis['kernel']} CPU backend"
    if synthesis["executor"] == "processes":
        restarts = synthesis["restarts"]
        text += f" ({restarts} restart{'s' if restarts != 1 else ''} after one died)"
    return [("synthesis", text)]


def _state(status: dict[str, Any]) -> str:
    """ready, or not ready with the reasons /readyz gives (starting, draining, stalled, ...)."""
    if status["ready"]:
        return "ready"
    return "; ".join(status.get("reasons") or ["draining" if status["draining"] else "starting"])


def _status(client: Client, args: argparse.Namespace) -> int:
    status = client.status()
    if args.json:
        import json

        print(json.dumps(status, indent=2))
        return 0
    c = status["controller"]
    q = status["queues"]
    m = status["memory"]
    rows: list[tuple[str, str]] = [
        ("state", _state(status)),
        ("workload", status["workload"]),
        *_controller_rows(c),
        ("bootstraps", f"{c['bootstraps']} cold, {c['rebootstraps']} re-bootstraps"),
        ("queues", f"backlog {q['backlog']}, synthesizing {q['synthesizing']}, ready "
                   f"{q['ready']}, proving {q['proving']}"),
        ("memory", f"{m['inflight_bytes'] / 2**30:.2f} / {m['budget_bytes'] / 2**30:.1f} GiB "
                   "in flight"),
        *_pool_rows(status["pool"]),
        *synthesis_rows(status.get("synthesis")),
        proving_row(status, lambda g: f"{g['busy_ratio']:.0%}"),
        ("jobs", JOBS_NOT_KNOWN if status["jobs"] is None
                 else ", ".join(f"{k} {v}" for k, v in status["jobs"].items()) or "none"),
        *journal_rows(status.get("journal")),
        *fleet_rows(status.get("fleet")),
        *engine_rows(status.get("engines")),
    ]  # fmt: skip
    print(render(("pacer", client.base_url), rows))
    return 0
