"""`pacer status` without a job: the service's state as a table of rows."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from pacer.cli.table import render
from pacer.client import BlockingClient

JOBS_NOT_KNOWN = "not known: a journal call hangs"


def seconds_text(value: float | None) -> str:
    """Seconds to the millisecond; ``-`` for none."""
    return "-" if value is None else f"{value:.3f}"


def _controller_rows(c: dict[str, Any]) -> list[tuple[str, str]]:
    """The PI controller's mode and terms; a baseline's name, mode and interval."""
    if "terms" not in c:
        return [("policy", f"{c['policy']} (baseline): {c['mode']}, interval "
                           f"{seconds_text(c['interval_s'])} s")]  # fmt: skip
    t = c["terms"]
    return [
        ("policy", c["policy"]),
        ("controller", f"{t['mode']}: interval {t['interval_s']:.3f} s, projected ready "
                       f"{t['projected_ready']:.1f} / setpoint {t['setpoint']:.1f}"),
        ("terms", f"P {t['p_term']:+.3f}  I {t['i_term']:+.3f}  feed-forward "
                  f"{t['ff_interval_s']:.3f} s"),
        *supply_rows(c.get("synthesis_supply_per_s"), t.get("ff_interval_s")),
        *queue_rows(c.get("synthesis_queue"), c.get("synthesis_handoff_s")),
    ]  # fmt: skip


def queue_rows(queue: int | None, handoff_s: float | None) -> list[tuple[str, str]]:
    """The partitions allowed to wait in front of the synthesis processes, and the measured
    hand-off (s) they cover; nothing before either is known (an older service, a cold start)."""
    if not queue:
        return []
    handoff = "" if handoff_s is None else f", covering a hand-off of {handoff_s:.3f} s"
    return [("synthesis queue", f"up to {queue} waiting for a synthesis process{handoff}")]


def verification_rows(status: dict[str, Any]) -> list[tuple[str, str]]:
    """How often partitions are verified, where, how many are under way, and how many were
    skipped as the verify threads fell behind (D201); nothing where none are verified."""
    plan = status.get("plan") or {}
    every = plan.get("verify_every")
    if not every:
        return []
    threads = plan.get("verify_threads")
    due = "every partition" if every == 1 else f"one partition in {every}"
    where = ("on the synthesis threads" if not threads
             else f"on {threads} thread{'s' if threads > 1 else ''} of its own")  # fmt: skip
    text = f"{due}, {where}; {status['queues'].get('verifying', 0)} running or waiting"
    skipped = (status.get("calls") or {}).get("verifications_skipped")
    if skipped:
        text += f"; {skipped} skipped, the verify threads behind (PACER_VERIFY_THREADS)"
    return [("verification", text)]


def supply_rows(supply: float | None, ff_interval_s: float | None) -> list[tuple[str, str]]:
    """What synthesis can supply (partitions/s) against the GPUs' rate, 1 ÷ the feed-forward
    interval (s), and which side bounds; nothing while either is unknown."""
    if not supply or not ff_interval_s:
        return []
    share = supply * ff_interval_s
    side = "synthesis bounds" if share < 1 else "the GPUs bound"
    return [("supply", f"synthesis {supply:.2f}/s against the GPUs' {1 / ff_interval_s:.2f}/s "
                       f"({share:.2f} of it): {side}")]  # fmt: skip


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


def synthesis_rows(
    synthesis: dict[str, Any] | None, busy: Callable[[dict[str, Any]], str] | None = None
) -> list[tuple[str, str]]:
    """Where synthesis runs, how it computes, how often its processes had to be replaced, and
    with ``busy`` its workers' busy share as ``busy(synthesis)`` words it (a service from
    before `busy_ratio` leaves it out)."""
    if not synthesis:  # a service from before this field
        return []
    text = synthesis["executor"]
    if synthesis.get("kernel"):
        text += f", {synthesis['kernel']} CPU backend"
    if synthesis["executor"] == "processes":
        restarts = synthesis["restarts"]
        text += f" ({restarts} restart{'s' if restarts != 1 else ''} after one died)"
    if busy is not None and synthesis.get("busy_ratio") is not None:
        text += f"; workers {busy(synthesis)}"
    return [("synthesis", text)]


def _state(status: dict[str, Any]) -> str:
    """ready, or not ready with the reasons /readyz gives (starting, draining, stalled, ...)."""
    if status["ready"]:
        return "ready"
    return "; ".join(status.get("reasons") or ["draining" if status["draining"] else "starting"])


def print_status(client: BlockingClient, args: argparse.Namespace) -> int:
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
        *synthesis_rows(status.get("synthesis"),
                        lambda s: f"{s['busy_ratio']:.0%} busy over the last minute"),
        proving_row(status, lambda g: f"{g['busy_ratio']:.0%}"),
        *verification_rows(status),
        ("jobs", JOBS_NOT_KNOWN if status["jobs"] is None
                 else ", ".join(f"{k} {v}" for k, v in status["jobs"].items()) or "none"),
        *journal_rows(status.get("journal")),
        *fleet_rows(status.get("fleet")),
        *engine_rows(status.get("engines")),
    ]  # fmt: skip
    print(render(("pacer", client.base_url), rows))
    return 0
