"""Faults a workload can throw, injected (tests/faults.py) into a real in-process service: every
job ends completed, with results that check, or failed with every attempt's reason; never
stuck, memory back, workers alive. And `pacer serve` exits on SIGTERM within its drain budget
whatever call hangs."""

from __future__ import annotations

import contextlib
import hashlib
import signal
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from pacer.api import views
from pacer.journal import Journal
from pacer.server import Server
from pacer.service import resources as host
from pacer.service.lifecycle import Service
from pacer.workload import job_seed
from tests import faults
from tests.servers import ENDED, ServerFactory, readyz_refuses, settings_for
from tests.waits import until, wait_until

LIMIT_S = "0.5"
FAULTY = {
    "PACER_WORKLOAD": "tests.faults:make",
    "PACER_GPU__WORKERS": "2",
    "PACER_RETRY__MAX": "3",
    "PACER_RETRY__BACKOFF_S": "0.01",
    "PACER_TIMEOUTS__SYNTHESIS_S": LIMIT_S,
    "PACER_TIMEOUTS__PROVE_S": LIMIT_S,
    "PACER_TIMEOUTS__VERIFY_S": LIMIT_S,
}


@contextlib.asynccontextmanager
async def running(tmp_path: Path, **env: str) -> AsyncIterator[Server]:
    """A service on the fault workload; hung calls are let go at the end."""
    faults.reset()
    svc = Server(Service.build(settings_for(tmp_path, **{**FAULTY, **env}), CollectorRegistry()))
    await svc.start()
    try:
        yield svc
    finally:
        faults.release_hung()
        if not svc.service.draining:
            await svc.shutdown()


async def ended(svc: Server, job_id: str) -> dict[str, Any]:
    """The job's detail once it has ended; an AssertionError if it is stuck."""
    detail = await until(lambda: views.job_detail(svc.service, job_id, 100), f"job {job_id} to end",
                         done=lambda job: job is not None and job["state"] in ENDED)  # fmt: skip
    assert detail is not None
    return detail


def noop_digest(job_id: str, params: dict[str, Any], index: int) -> str:
    return hashlib.sha256(f"{job_seed(job_id, params)}:{index}".encode()).hexdigest()


def fault(call: str, kind: str, index: int, times: int | None = None) -> dict[str, Any]:
    return {"call": call, "kind": kind, "index": index, **({"times": times} if times else {})}


# (faults, env, the state the job ends in, {partition: (failed attempts, reason they give)})
CASES: dict[str, tuple[list[dict[str, Any]], dict[str, str], str, dict[int, tuple[int, str]]]] = {
    "synthesis-raises-once": (
        [fault("synthesis", "raise", 1, times=1)], {}, "completed",
        {1: (1, "synthesis failed: RuntimeError('injected synthesis fault')")},
    ),
    "synthesis-raises-always": (
        [fault("synthesis", "raise", 1)], {}, "failed",
        {1: (3, "synthesis failed: RuntimeError('injected synthesis fault')")},
    ),
    "synthesis-base-exception": (
        [fault("synthesis", "base", 2)], {}, "failed",
        {2: (3, "synthesis failed: InjectedBaseError('injected synthesis BaseException')")},
    ),
    "synthesis-hangs-once": (
        [fault("synthesis", "hang", 0, times=1)], {}, "completed",
        {0: (1, f"synthesis timed out after {LIMIT_S} s")},
    ),
    "synthesis-hangs-always": (
        [fault("synthesis", "hang", 0)], {}, "failed",
        {0: (3, f"synthesis timed out after {LIMIT_S} s")},
    ),
    "prove-raises-once": (
        [fault("prove", "raise", 2, times=1)], {}, "completed",
        {2: (1, "proving failed: RuntimeError('injected prove fault')")},
    ),
    "prove-raises-always": (
        [fault("prove", "raise", 2)], {}, "failed",
        {2: (3, "proving failed: RuntimeError('injected prove fault')")},
    ),
    "prove-base-exception-once": (
        [fault("prove", "base", 0, times=1)], {}, "completed",
        {0: (1, "proving failed: InjectedBaseError('injected prove BaseException')")},
    ),
    "prove-base-exception-always": (
        [fault("prove", "base", 0)], {}, "failed",
        {0: (3, "proving failed: InjectedBaseError('injected prove BaseException')")},
    ),
    "prove-hangs-once": (
        [fault("prove", "hang", 3, times=1)], {}, "completed",
        {3: (1, f"prove timed out after {LIMIT_S} s")},
    ),
    "prove-hangs-always": (
        [fault("prove", "hang", 3)], {}, "failed",
        {3: (3, f"prove timed out after {LIMIT_S} s")},
    ),
    "prove-returns-none": (
        [fault("prove", "none", 1, times=2)], {"PACER_VERIFY_EVERY": "0"}, "completed",
        {1: (2, "proving returned NoneType, not a Proof")},
    ),
    "bad-digest-unverified": (
        [fault("prove", "bad_digest", 1)], {"PACER_VERIFY_EVERY": "0"}, "failed",
        {1: (3, "proving returned an invalid digest 'not a digest'")},
    ),
    "nan-phase": (
        [fault("prove", "nan_phase", 2, times=1)], {}, "completed",
        {2: (1, "proving returned phase 'work' of nan s")},
    ),
    "verify-false-once": (
        [fault("verify", "false", 1, times=1)], {}, "completed",
        {1: (1, "verification failed: the proof does not check")},
    ),
    "verify-raises-always": (
        [fault("verify", "raise", 0)], {}, "failed",
        {0: (3, "verification failed: RuntimeError('injected verify fault')")},
    ),
    "verify-base-exception-once": (
        [fault("verify", "base", 3, times=1)], {}, "completed",
        {3: (1, "verification failed: InjectedBaseError('injected verify BaseException')")},
    ),
    "verify-hangs-once": (
        [fault("verify", "hang", 2, times=1)], {}, "completed",
        {2: (1, f"verify timed out after {LIMIT_S} s")},
    ),
    "slow-within-the-limit": (
        [{"call": "prove", "kind": "slow", "seconds": 0.05}], {}, "completed", {},
    ),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("faulty", "env", "state", "expected"), list(CASES.values()), ids=list(CASES)
)
async def test_a_fault_ends_in_a_completed_or_failed_job_with_every_attempt(
    tmp_path: Path,
    faulty: list[dict[str, Any]],
    env: dict[str, str],
    state: str,
    expected: dict[int, tuple[int, str]],
) -> None:
    async with running(tmp_path, **env) as svc:
        params = {"faults": faulty}
        job = await svc.service.submit(4, params, 0)
        detail = await ended(svc, job.id)
        assert detail["state"] == state, detail
        for part in detail["partition_results"]:
            count, reason = expected.get(part["index"], (0, ""))
            attempts = part["attempts"]
            assert [a["attempt"] for a in attempts] == list(range(1, count + 1)), part
            assert all(a["reason"].startswith(reason) for a in attempts), attempts
        failed_attempts = sum(count for count, _ in expected.values())
        if state == "completed":
            assert detail["error"] is None
            for part in detail["partition_results"]:
                assert part["digest"] == noop_digest(job.id, params, part["index"])
        else:
            (index, (count, reason)), *_ = expected.items()
            assert detail["error"].startswith(f"partition {index} failed after 3 attempts: ")
            assert reason in detail["error"]
        assert [f["index"] for f in detail["last_failures"]] == [
            index for index, (count, _) in expected.items() for _ in range(count)
        ][:5]
        value = svc.service.registry.get_sample_value
        hung = sum(value("pacer_hung_calls_total", {"call": c}) or 0 for c in faults.CALLS)
        timeouts = sum(count for count, reason in expected.values() if "timed out" in reason)
        assert hung == timeouts
        retried = failed_attempts if state == "completed" else failed_attempts - 1
        assert value("pacer_partition_retries_total") == retried
        # Nothing left holding memory once hung calls return, and every worker alive.
        faults.release_hung()
        p = svc.service.pipeline
        await until(lambda: p.inflight_bytes == 0 and p.abandoned == 0, "memory to come back")
        await until(lambda: p.abandoned_threads == 0, "abandoned threads to end")
        assert p.live_workers == p.workers == 2
        assert p.idle


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_hung_prove_stalls_no_other_job(tmp_path: Path) -> None:
    async with running(tmp_path, PACER_GPU__WORKERS="1") as svc:
        stuck = await svc.service.submit(2, {"faults": [fault("prove", "hang", 0)]}, 0)
        others = [await svc.service.submit(3, {}, 0) for _ in range(3)]
        for job in others:
            assert (await ended(svc, job.id))["state"] == "completed"
        detail = await ended(svc, stuck.id)
        assert detail["state"] == "failed"
        assert detail["error"].endswith(f"prove timed out after {LIMIT_S} s")
        assert svc.service.pipeline.live_workers == 1  # replaced each time


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_retried_partition_keeps_its_job_place_in_the_backlog(tmp_path: Path) -> None:
    async with running(tmp_path, PACER_GPU__WORKERS="1") as svc:
        first = await svc.service.submit(1, {"faults": [fault("prove", "raise", 0, times=1)]}, 0)
        slow = [{"call": "prove", "kind": "slow", "seconds": 0.02}]
        later = await svc.service.submit(40, {"faults": slow}, 0)  # 0.8 s of proving on one worker
        first_done, later_done = await ended(svc, first.id), await ended(svc, later.id)
        assert first_done["state"] == later_done["state"] == "completed"
        # Queued again at its job's place, ahead of the later job: not behind its 40.
        assert first_done["updated_at"] < later_done["updated_at"]


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_restart_fails_a_job_whose_partition_is_out_of_attempts(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, **FAULTY)
    with Journal(settings.journal.path) as journal:
        job = journal.add_job(3, "faults", {}, 0)
        for attempt in range(2):
            journal.record_attempt(job.id, 1, f"proving failed: try {attempt}", 0, 5)
    async with running(tmp_path, PACER_RETRY__MAX="2") as svc:
        detail = await views.job_detail(svc.service, job.id, 100)
        assert detail is not None
        assert detail["state"] == "failed"  # not resumed
        assert detail["error"] == "partition 1 failed after 2 attempts: proving failed: try 1"
        assert svc.service.pipeline.backlog == 0


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_cancelled_job_is_not_queued_again_after_its_backoff(tmp_path: Path) -> None:
    async with running(tmp_path, PACER_RETRY__BACKOFF_S="0.3") as svc:
        job = await svc.service.submit(1, {"faults": [fault("prove", "raise", 0)]}, 0)
        await until(lambda: bool(svc.service.jobs._retries), "a backoff to start")
        [backoff] = svc.service.jobs._retries.values()
        await svc.service.cancel(job.id)
        assert not svc.service.jobs._retries
        assert backoff.cancelled()  # its end queues nothing again
        assert svc.service.pipeline.backlog == 0
        assert svc.service.pipeline.idle
        assert (await ended(svc, job.id))["state"] == "cancelled"


def journal_rows(path: Path, job_id: str) -> tuple[str, int]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        (state,) = db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
        (done,) = db.execute(
            "SELECT COUNT(*) FROM partitions WHERE job_id = ?", (job_id,)
        ).fetchone()
    return state, done


@pytest.mark.parametrize("call", ["synthesis", "prove", "verify"])
def test_sigterm_exits_within_the_drain_budget_whatever_call_hangs(
    server_factory: ServerFactory, tmp_path: Path, call: str
) -> None:
    # Default limits (minutes): the hung call is still running when the drain budget ends.
    server = server_factory(PACER_WORKLOAD="tests.faults:make", PACER_SHUTDOWN__DRAIN_S="1",
                            PACER_GPU__WORKERS="1").start()  # fmt: skip
    job_id = server.client.submit(2, {"faults": [{"call": call, "kind": "hang", "index": 0}]})
    queue = {"synthesis": "synthesizing", "prove": "proving", "verify": "verifying"}[call]
    wait_until(lambda: server.client.status()["queues"][queue] > 0, f"a hung {call}")
    began = time.monotonic()
    server.signal(signal.SIGTERM)
    assert server.wait(20) == 0
    assert time.monotonic() - began < 1 + 14  # the drain budget, not the hung call's minutes
    assert "drain budget of 1 s spent" in server.log
    state, done = journal_rows(tmp_path / "journal.sqlite", job_id)
    assert state in ("queued", "running")  # for the next start
    assert done <= 1  # partition 0, hung, is pending


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_close_stuck_behind_a_hung_call_does_not_hold_the_shutdown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host, "CLOSE_WORKLOAD_S", 0.2)
    unblock = threading.Event()
    env = {"PACER_SHUTDOWN__DRAIN_S": "0.2", "PACER_TIMEOUTS__PROVE_S": "0"}  # 300 s: hung on
    async with running(tmp_path, **env) as svc:

        def stuck_close() -> None:
            unblock.wait(30)

        svc.service.workload.close = stuck_close  # type: ignore[method-assign]
        try:
            await svc.service.submit(1, {"faults": [fault("prove", "hang", 0)]}, 0)
            await until(lambda: svc.service.pipeline.gpu_busy == 1, "the hung prove")
            began = time.monotonic()
            assert not await svc.shutdown()  # the drain did not finish
            assert time.monotonic() - began < 10  # the bounds, not the stuck close's 30 s
        finally:
            unblock.set()


def test_a_hung_prove_on_a_one_worker_host_is_abandoned_and_its_job_completes(
    server_factory: ServerFactory,
) -> None:
    # Every partition's first prove hangs (for HANG_MAX_S); the derived limit is the floor
    # here (no estimate yet), cut to 3 s so that four hangs in a row take seconds.
    server = server_factory(PACER_WORKLOAD="tests.faults:make", PACER_GPU__WORKERS="1",
                            PACER_TIMEOUTS__PROVE_FLOOR_S="3",
                            PACER_RETRY__BACKOFF_S="0.01").start()  # fmt: skip
    began = time.monotonic()
    job_id = server.client.submit(4, {"faults": [{"call": "prove", "kind": "hang", "times": 1}]})
    wait_until(lambda: readyz_refuses(server.client, "no GPU worker making progress"),
               "/readyz to say no worker makes progress", timeout_s=30)  # fmt: skip
    stalled = [line for line in server.metrics_text().splitlines()
               if line.startswith("pacer_gpu_stalled_seconds ")]  # fmt: skip
    assert stalled
    assert float(stalled[0].split()[1]) >= 3
    job = wait_until(lambda: server.client.job(job_id), "the job to end", timeout_s=60,
                     done=lambda job: job["state"] in ENDED)  # fmt: skip
    took_s = time.monotonic() - began
    assert job["state"] == "completed"
    failures = sorted((a["index"], a["attempt"], a["reason"]) for a in job["last_failures"])
    assert failures == [(i, 1, "prove timed out after 3 s") for i in range(4)], failures
    assert took_s < 4 * 3 + 30  # four limits, and generous room for a loaded machine
    wait_until(lambda: not readyz_refuses(server.client, "no GPU worker"), "ready again")
