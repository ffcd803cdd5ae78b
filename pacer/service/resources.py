"""The host at start and at the end: its memory read for the plan (`pacer.plan.resolve` fits
the budget to it), a pooled workload's pool pinned (on the thread `pacer.service.first_steps`
begins), and the workload's close bounded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from pacer.config.operation import CLOSE_WORKLOAD_S
from pacer.host.memory import HostFiles, HostMemory, bytes_text
from pacer.plan import Plan, host_room
from pacer.runtime.threads import DaemonPool
from pacer.workload import PooledWorkload

log = logging.getLogger("pacer.service")


def read_host(files: HostFiles) -> HostMemory | None:
    """The host's memory and this process's cgroup limit, read now; None, with a warning, where
    /proc/meminfo cannot be read: the budget then stays as configured."""
    try:
        return HostMemory.read(files)
    except (OSError, ValueError) as exc:
        log.warning("cannot read the host's memory (%s): the memory budget "
                    "(PACER_MEMORY__BUDGET_BYTES) is not checked against it", exc)  # fmt: skip
        return None


def warn_if_clamped(configured: Plan, plan: Plan) -> None:
    """Warn where ``plan`` clamps the budget ``configured`` had to what the host (or this
    process's cgroup) can give, naming which: partitions in flight could otherwise take the
    host into the OOM killer (a budget set for a larger host must still start here). The
    default budget is automatic, never clamped: no warning."""
    if not plan.memory.clamped:
        return
    budget, partition_bytes = plan.memory.configured_budget_bytes, plan.partition_bytes
    log.warning(
        "the memory budget (PACER_MEMORY__BUDGET_BYTES=%d, %s) is more than the host can "
        "give: %s; the budget in effect is clamped to that, %d partitions of %s in flight "
        "instead of %d, so that they cannot take the host into the OOM killer",
        budget, bytes_text(budget), host_room(plan.memory), plan.caps.inflight_partitions,
        bytes_text(partition_bytes), configured.caps.inflight_partitions,
    )  # fmt: skip


def prepare_pool(workload: PooledWorkload, plan: Plan, slots_set: bool) -> None:
    """Let a pooled workload allocate its pool for the whole run (pinning host memory runs at
    about 2 GiB/s), with the plan's slots, on the calling thread; a warning where the budget
    holds fewer than the pipeline keeps in flight (unless ``slots_set``:
    PACER_GPU__POOL_SLOTS says how many)."""
    slots, wanted, gib = plan.pool_slots, plan.pool_slots_wanted, plan.partition_bytes / 2**30
    if not slots_set and slots < wanted:
        log.warning(
            "the memory budget (PACER_MEMORY__BUDGET_BYTES, %.1f GiB) holds %d partitions "
            "of %.2f GiB, fewer than the %d (%.1f GiB) that every synthesis the cores allow, "
            "the ready buffer and the proving workers keep in flight: the GPUs may wait on "
            "synthesis; raise the budget if the host has the memory",
            plan.budget_bytes / 2**30, slots, gib, wanted, wanted * gib,
        )  # fmt: skip
    log.info("preparing %d pool slots of %.2f GiB before ready (adopting what the previous "
             "pacer kept, pinning the rest)", slots, gib)  # fmt: skip
    started = time.monotonic()
    workload.prepare(slots, plan.budget_bytes, plan.caps.synthesis_concurrency)
    pool = workload.pool
    adopted = pool.slots_adopted if pool else 0
    log.info(
        "pinned pool ready: %d slots (%d adopted, %d allocated), %.1f GiB in %.1f s",
        slots, adopted, slots - adopted, (pool.total_bytes if pool else 0) / 2**30,
        time.monotonic() - started,
    )  # fmt: skip


async def close_workload(close: Callable[[], object], *, bounded: bool) -> None:
    """The workload's ``close`` (the pinned pool, synthesis processes) on a daemon thread;
    ``bounded``, when calls are still in flight or hung, for at most CLOSE_WORKLOAD_S: a
    close stuck behind a hung call must not hold the exit, and the process's end frees
    what it held (pool blocks left in PACER_GPU__SHM_DIR are removed at the next start)."""
    closer = DaemonPool(1, "pacer-close")
    try:
        await asyncio.wait_for(asyncio.wrap_future(closer.submit(close)),
                               CLOSE_WORKLOAD_S if bounded else None)  # fmt: skip
    except TimeoutError:
        log.error("the workload's close took over %.0f s; exiting without it (a hung call?)",
                  CLOSE_WORKLOAD_S)  # fmt: skip
    except Exception:
        log.exception("the workload's close failed")
    finally:
        closer.shutdown()
