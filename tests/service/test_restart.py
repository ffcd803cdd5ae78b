"""A restart without a drain of memory: `pacer serve` stopped keeping its pinned pool (SIGTERM
with PACER_GPU__KEEP_POOL, or SIGUSR2), and the next `pacer serve` adopting it: the status
says so, no new block is made, and the adopted slots prove. Also through systemd's descriptor
store, played by a real unix datagram socket (`tests.kept_pools.ServiceManager`).

The GPU workload runs with its pool in shared memory and synthesis in processes, proving
through the NumPy stand-in of `tests.service.test_gpu_path` where CI has no CUDA. A stop that
leaves a journal call hung keeps the pool all the same.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpu.shm.block_maps import maps_inode
from gpu.shm.blocks import BLOCK_PREFIX
from gpu.shm.record import sweep
from tests.kept_pools import ServiceManager, records
from tests.servers import ROOT, ServerFactory, ServerProcess
from tests.service.test_process import job_states
from tests.service.test_stopping import WAITS_ON_LOCKS, commit_held
from tests.waits import wait_until

pytestmark = pytest.mark.slow

GPU = {
    "PACER_WORKLOAD": "tests.service.test_gpu_path:shared_gpu_workload",
    "PACER_SYNTHESIS__CORES": "2",
    "PACER_GPU__POOL_SLOTS": "4",
}


def blocks_in(directory: str) -> dict[tuple[str, int], str]:
    """The pool blocks in ``directory``: inode → name."""
    found = {}
    for name in os.listdir(directory):
        if name.startswith(BLOCK_PREFIX):
            stat = os.stat(f"{directory}/{name}")
            found[maps_inode(stat.st_dev, stat.st_ino)] = name
    return found


def prove_a_job(server: ServerProcess, partitions: int = 6) -> None:
    job_id = server.client.submit(partitions, {"seed": 11})
    wait_until(lambda: server.client.job(job_id)["state"] == "completed", "the job to complete",
               timeout_s=60)  # fmt: skip


@pytest.mark.parametrize(
    ("env", "signum"),
    [({"PACER_GPU__KEEP_POOL": "true"}, signal.SIGTERM), ({}, signal.SIGUSR2)],
    ids=["keep-pool-setting", "handover-signal"],
)
def test_the_next_pacer_adopts_the_pool_its_predecessor_kept(
    server_factory: ServerFactory, env: dict[str, str], signum: int, shm_dir: str
) -> None:
    first = server_factory(**GPU, **env).start()
    prove_a_job(first)
    assert first.client.status()["pool"]["origin"] == {"adopted": 0, "allocated": 4}
    first.signal(signum)
    assert first.wait() == 0
    ((_, kept),) = records(shm_dir).items()
    assert (kept.state, kept.holder_pid, len(kept.blocks)) == ("kept", first.proc.pid, 4)  # type: ignore[union-attr]
    before = blocks_in(shm_dir)
    assert sorted(before.values()) == sorted(kept.blocks)
    assert "kept for the next pacer" in first.log

    second = server_factory(**GPU, **env).start()
    status = second.client.status()
    assert status["pool"]["origin"] == {"adopted": 4, "allocated": 0}, second.log
    assert status["startup"]["pool_origin"] == {"adopted": 4, "allocated": 0}
    phases = status["startup"]["phases_s"]
    assert {"open", "prepare", "prepare.pool", "prepare.synthesis_processes", "resume", "api"} <= (
        set(phases)
    )
    assert status["startup"]["ready_s"] >= phases["prepare"]
    after = blocks_in(shm_dir)
    assert set(after) == set(before)  # the same blocks: none made, none lost
    assert all(name.startswith(f"{BLOCK_PREFIX}{second.proc.pid}-") for name in after.values())  # type: ignore[union-attr]
    prove_a_job(second)
    assert second.client.status()["pool"]["allocations_after_warmup"] == 0
    assert "start-up: ready in" in second.log
    second.signal(signal.SIGTERM)
    assert second.wait() == 0
    if env:  # kept again, for the pacer after
        assert [r.generation for r in records(shm_dir).values()] == [2]
        sweep(shm_dir, drop_kept=True)
    else:  # not asked to keep it: freed as ever
        assert (records(shm_dir), blocks_in(shm_dir)) == ({}, {})


def test_the_pool_goes_through_the_descriptor_store_to_the_next_pacer(
    server_factory: ServerFactory, tmp_path: Path, shm_dir: str
) -> None:
    manager = ServiceManager(tmp_path)
    try:
        first = launched(manager, server_factory(**GPU, PACER_GPU__KEEP_POOL="true"))
        assert blocks_in(shm_dir) == {}  # memfds: no file in the directory
        prove_a_job(first)  # synthesis processes write the memfds through /proc/PID/fd
        first.signal(signal.SIGTERM)
        assert first.wait() == 0
        manager.receive()
        assert any(m.startswith("READY=1") for m in manager.messages)
        ((_, kept),) = records(shm_dir).items()
        assert (kept.store, sorted(manager.stored)) == ("fdstore", sorted(kept.blocks))

        second = launched(manager, server_factory(**GPU, PACER_GPU__KEEP_POOL="true"))
        assert second.client.status()["pool"]["origin"] == {"adopted": 4, "allocated": 0}
        prove_a_job(second)
        second.signal(signal.SIGTERM)
        assert second.wait() == 0
        manager.receive()
        assert sorted(manager.stored) == sorted(kept.blocks)  # the same, stored once each
    finally:
        manager.close()
        sweep(shm_dir, drop_kept=True)  # the record of the pool kept in the store


def test_a_stop_that_leaves_a_hung_journal_call_still_keeps_the_pool(
    server_factory: ServerFactory, tmp_path: Path, shm_dir: str
) -> None:
    # The commit waits on a lock another connection holds (PACER_JOURNAL__BUSY_TIMEOUT_S=600):
    # SIGUSR2 leaves it after the bound, exits 1, and the pool is kept all the same.
    bounds = {"PACER_SHUTDOWN__DRAIN_S": "0.5", "PACER_SHUTDOWN__JOURNAL_S": "1"}
    first = server_factory(**GPU, **bounds, **WAITS_ON_LOCKS).start()
    journal = tmp_path / "journal.sqlite"
    job_id = first.client.submit(200, {"seed": 11})
    with commit_held(first, journal):
        first.signal(signal.SIGUSR2)
        assert first.wait(30) == 1
    assert "stopping without journal" in first.log
    ((_, kept),) = records(shm_dir).items()
    assert (kept.state, kept.holder_pid) == ("kept", first.proc.pid)  # type: ignore[union-attr]

    second = server_factory(**GPU).start()
    assert second.client.status()["pool"]["origin"] == {"adopted": 4, "allocated": 0}
    wait_until(lambda: job_states(journal)[job_id] == "completed", "the job to complete",
               timeout_s=60)  # fmt: skip
    second.signal(signal.SIGTERM)
    assert second.wait() == 0


def launched(manager: ServiceManager, server: ServerProcess) -> ServerProcess:
    """``server`` started as the unit's next process, ready."""
    with open(server.log_path, "ab") as log:
        server.proc = manager.launch(  # type: ignore[assignment]
            [sys.executable, "-m", "pacer", "serve"], server.env, cwd=ROOT, stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    server.client.wait_ready(30)
    return server
