"""`pacer submit` and `pacer status`: the command line's side of the HTTP API."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from pacer.client import ApiError, Client
from pacer.config import Settings
from pacer.table import render

TERMINAL = ("completed", "failed", "cancelled")


def run(args: argparse.Namespace, settings: Settings) -> int:
    url = args.url or f"http://{settings.api.host}:{settings.api.port}"
    token = settings.api.token.get_secret_value() if settings.api.token else None
    client = Client(url, token)
    try:
        if args.command == "submit":
            client.wait_ready(args.timeout)
            return _submit(client, args)
        client.wait_ready(args.timeout, "/healthz")  # the status of a service not ready, too
        if args.job:
            return _job_status(client, args)
        return _status(client, args)
    except ApiError as exc:
        print(f"pacer: {exc}", file=sys.stderr)
        return 1


def _params(pairs: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ApiError(f"--param takes NAME=INT, got {pair!r}")
        try:
            params[name] = int(value)
        except ValueError:
            raise ApiError(f"--param {name}: {value!r} is not an integer") from None
    return params


def _submit(client: Client, args: argparse.Namespace) -> int:
    params = _params(args.param)
    ids = [client.submit(args.partitions, params, args.priority) for _ in range(args.jobs)]
    for job_id in ids:
        print(job_id)
    if not args.wait:
        return 0
    started = time.monotonic()
    total = args.jobs * args.partitions
    last = ""
    while True:
        jobs = [client.job(job_id) for job_id in ids]
        done = sum(j["partitions_done"] for j in jobs)
        ended = [j for j in jobs if j["state"] in TERMINAL]
        line = (f"{done}/{total} partitions, {len(ended)}/{len(jobs)} jobs ended, "
                f"{time.monotonic() - started:.0f} s")  # fmt: skip
        if line != last:
            print(line, file=sys.stderr, flush=True)
            last = line
        if len(ended) == len(jobs):
            break
        time.sleep(0.5)
    rows = [(j["id"], j["state"], j["partitions"], (j["result_digest"] or j["error"] or "")[:40])
            for j in jobs]  # fmt: skip
    print(render(("job", "state", "partitions", "result digest / error"), rows))
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
    rows: list[tuple[str, str]] = [
        ("state", job["state"] + (f": {job['error']}" if job["error"] else "")),
        ("partitions", f"{job['partitions']}: {summary['completed']} completed, "
                       f"{summary['failed']} failed, {summary['pending']} pending"),
        ("priority", str(job["priority"])),
        ("params", ", ".join(f"{k}={v}" for k, v in job["params"].items()) or "none"),
        *[("failed", f"partition {f['index']}: {f['error']}") for f in summary["first_failures"]],
        ("result digest", job["result_digest"] or "-"),
    ]  # fmt: skip
    print(render(("job", job["id"]), rows))
    if page is not None:
        print()
        print(render(("partition", "state", "gpu", "synthesis s", "gpu s", "digest / error"), [
            (str(p["index"]), p["state"], "-" if p["gpu"] is None else str(p["gpu"]),
             _seconds(p["synthesis_s"]), _seconds(p["gpu_s"]),
             (p["digest"] or p["error"] or "")[:40])
            for p in page["partition_results"]
        ]))  # fmt: skip
        if page["next_offset"] is not None:
            print(f"(more from --offset {page['next_offset']})")
    return 0


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


def _journal_rows(journal: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Whether the journal takes writes; if not, since when, why, and what waits for it."""
    if not journal:  # a service from before this field
        return []
    if journal["healthy"]:
        return [("journal", "ok")]
    held = ", dispatch held" if journal["dispatch_held"] else ""
    return [(
        "journal",
        f"FAILING for {journal['failing_s']:.0f} s: {journal['error']}; "
        f"{journal['uncommitted_results']} results wait in memory{held}",
    )]  # fmt: skip


def _synthesis_rows(synthesis: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Where synthesis runs, how it computes, and how often its processes had to be replaced."""
    if not synthesis:  # a service from before this field
        return []
    text = synthesis["executor"]
    if synthesis.get("kernel"):
        text += f", {synthesis['kernel']} kernel"
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
        *_synthesis_rows(status.get("synthesis")),
        ("gpus", ", ".join(f"{g['gpu']}: {g['busy_ratio']:.0%} busy ({g['workers']} "
                           f"worker{'s' if g['workers'] != 1 else ''})"
                           for g in status["gpus"])),
        ("jobs", ", ".join(f"{k} {v}" for k, v in status["jobs"].items()) or "none"),
        *_journal_rows(status.get("journal")),
    ]  # fmt: skip
    print(render(("pacer", client.base_url), rows))
    return 0
