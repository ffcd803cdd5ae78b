"""`pacer serve` killed with SIGKILL at random moments of a multi-job run, and started again
each time: every job accepted (202) completes exactly once with the results a fault-free
computation gives, and nothing a killed service started outlives it or keeps its pool mapped.

Two runs: the CPU workload (synthesis on threads) and the GPU workload's processes executor
(pool slots in shared memory written by forkserver synthesis processes), proving through the NumPy
stand-in of `tests.service.test_gpu_path` where CI has no CUDA.
"""

from __future__ import annotations

import contextlib
import random
import re
import signal
import sqlite3
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpu.field import by_name
from gpu.procs.lifeline import SYNTHESIS_PROCESS_NAME
from gpu.reference.digest import digest
from gpu.reference.ntt import compute_h
from gpu.reference.synthesis import synthesize
from pacer.client import ApiError
from pacer.journal import result_digest
from pacer.workload import job_seed
from tests.processes import descendants, wait_until_gone
from tests.servers import ServerFactory, ServerProcess
from tests.service import test_gpu_path
from tests.waits import wait_until

pytestmark = pytest.mark.slow

KILLS = 20
PHASES = ("submit", "dispatch", "commit", "drain")
COMMIT_INTERVAL_S = 0.05
MARK = "KILL_TEST_SERVICE"  # in each service's environment, so in its children's


@dataclass(frozen=True)
class Variant:
    env: dict[str, str]
    field: str
    log_n: int
    children: bool  # the service starts processes of its own (forkserver, workers, tracker)
    partitions: tuple[int, int]  # a job's size, at least and at most: work left at most kills


VARIANTS = {
    "threads": Variant(
        {"PACER_NTT__LOG_N": "8", "PACER_NTT__CPU_BACKEND": "numpy"},
        "babybear",
        8,
        children=False,
        partitions=(20, 60),
    ),
    "processes": Variant(
        {
            "PACER_WORKLOAD": "tests.service.test_gpu_path:shared_gpu_workload",
            "PACER_SYNTHESIS__CORES": "2",
        },
        "goldilocks",
        test_gpu_path.LOG_N,
        children=True,
        partitions=(3, 8),
    ),
}


@dataclass
class Run:
    """What the test saw across the kills."""

    accepted: list[str] = field(default_factory=list)  # 202 received
    kills: int = 0  # SIGKILLs that found the service running
    mid_run: int = 0  # ... with a job not yet completed in the journal
    phases: Counter[str] = field(default_factory=Counter)
    sizes: tuple[int, int] = (2, 5)  # partitions of a job submitted: at least, at most


def journal_jobs(journal: Path) -> dict[str, tuple[str, int, int, str | None]]:
    """id → (state, partitions, partitions_done, result_digest)."""
    with contextlib.closing(sqlite3.connect(journal)) as db:
        rows = db.execute("SELECT id, state, partitions, partitions_done, result_digest FROM jobs")
        return {row[0]: tuple(row[1:]) for row in rows}


def submit_some(server: ServerProcess, run: Run, jobs: int, rng: random.Random) -> list[str]:
    """Submit ``jobs`` jobs of ``run.sizes`` partitions; the ids accepted until the service went
    away."""
    ids = []
    for _ in range(jobs):
        try:
            ids.append(server.client.submit(rng.randint(*run.sizes)))
        except ApiError:
            break  # killed meanwhile: whether the job was journaled, the test does not know
    run.accepted += ids
    return ids


def kill_at_random(
    server: ServerProcess, phase: str, rng: random.Random, run: Run
) -> dict[int, tuple[str, int]]:
    """Drive the service into ``phase`` and SIGKILL it at a random moment of it; the processes
    below it just before the kill."""
    if phase == "submit":  # while jobs are being accepted
        jobs = threading.Thread(
            target=submit_some, args=(server, run, 4, random.Random(rng.random()))
        )
        jobs.start()
        time.sleep(rng.uniform(0, 0.04))
    elif phase == "dispatch":  # while partitions are dispatched, synthesized, proved
        submit_some(server, run, 2, rng)
        time.sleep(rng.uniform(0, 0.15))
    elif phase == "commit":  # around a batch of results going into the journal
        ids = submit_some(server, run, 2, rng)
        wait_until(lambda: any(server.client.job(i)["partitions_done"] for i in ids), "a commit",
                   timeout_s=10)  # fmt: skip
        time.sleep(rng.uniform(0, COMMIT_INTERVAL_S))
    else:  # while draining after SIGTERM
        submit_some(server, run, 2, rng)
        server.signal(signal.SIGTERM)
        time.sleep(rng.uniform(0, 0.03))
    assert server.proc is not None
    tree = descendants(server.proc.pid)
    if server.proc.poll() is None:
        run.kills += 1
        run.phases[phase] += 1
    server.signal(signal.SIGKILL)
    server.wait(10)
    if phase == "submit":
        jobs.join(15)
    return tree


def expected_digest(variant: Variant, job_id: str, partitions: int) -> str:
    """The job's result as a fault-free computation in this process gives it."""
    prime = by_name(variant.field)
    seed = job_seed(job_id, {})
    digests = []
    for index in range(partitions):
        vectors = synthesize(seed, index, variant.log_n, field=prime)
        digests.append(digest(compute_h(*vectors, field=prime), field=prime))
    return result_digest(digests)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_killed_at_random_moments_every_job_completes_once_and_nothing_outlives_a_kill(
    name: str, server_factory: ServerFactory, tmp_path: Path
) -> None:
    variant = VARIANTS[name]
    env = {**variant.env, "PACER_JOURNAL__COMMIT_INTERVAL_S": str(COMMIT_INTERVAL_S)}
    journal = tmp_path / "journal.sqlite"
    rng = random.Random(f"kill-{name}")
    # Each phase as often as the others, in a random order, until KILLS kills have found the
    # service running (one that has drained already is restarted, not counted).
    phases = [PHASES[k % len(PHASES)] for k in range(2 * KILLS)]
    rng.shuffle(phases)
    run = Run(sizes=variant.partitions)
    servers = []
    for round_, phase in enumerate(phases):
        if run.kills == KILLS:
            break
        mark = f"{name}-{round_}"
        server = server_factory(**env, **{MARK: mark}).start()
        servers.append(server)
        assert server.proc is not None
        pid = server.proc.pid
        tree = descendants(pid)
        if variant.children:  # the synthesis processes are up before the service is ready
            assert SYNTHESIS_PROCESS_NAME in [comm for comm, _ in tree.values()], tree
            assert f"synthesis processes ({SYNTHESIS_PROCESS_NAME}) end with this" in server.log
        kills = run.kills
        tree |= kill_at_random(server, phase, rng, run)
        unfinished = any(job[0] != "completed" for job in journal_jobs(journal).values())
        run.mid_run += run.kills > kills and unfinished
        wait_until_gone(tree, pid, environment=f"{MARK}={mark}",
                        what=f"round {round_} ({phase}): the killed service's processes to end "
                        "and nothing to map its pool")  # fmt: skip

    final = server_factory(**env).start()
    servers.append(final)
    wait_until(lambda: all(job[0] == "completed" for job in journal_jobs(journal).values()),
               "every job to complete after the last restart", timeout_s=60)  # fmt: skip
    final.signal(signal.SIGTERM)
    assert final.wait(30) == 0

    assert run.kills == KILLS, f"only {run.kills} kills found the service running"
    assert run.mid_run >= KILLS // 2, f"only {run.mid_run} of the kills came mid-run"
    assert set(run.phases) == set(PHASES)
    jobs = journal_jobs(journal)
    assert len(run.accepted) >= KILLS
    assert set(run.accepted) <= set(jobs), "an accepted job was lost"
    completions: Counter[str] = Counter()
    for server in servers:
        completions.update(re.findall(r"job completed: \w+ \[job=(\w+)\]", server.log))
    with contextlib.closing(sqlite3.connect(journal)) as db:
        rows = Counter(job for (job,) in db.execute("SELECT job_id FROM partitions"))
        distinct = dict(
            db.execute(
                "SELECT job_id, COUNT(DISTINCT idx) FROM partitions WHERE state = 'completed' "
                "GROUP BY job_id"
            ).fetchall()
        )
    for job_id, (state, partitions, done, job_digest) in jobs.items():
        assert (state, done) == ("completed", partitions), job_id
        assert rows[job_id] == distinct[job_id] == partitions, f"{job_id}: duplicate results"
        assert completions[job_id] <= 1, f"{job_id} completed twice"
        assert job_digest == expected_digest(variant, job_id, partitions), job_id
