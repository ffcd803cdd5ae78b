"""Synthesis in worker processes, written in place into shared-memory pool slots (no GPU)."""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import resource
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from gpu.field.babybear import BABYBEAR
from gpu.field.goldilocks import GOLDILOCKS
from gpu.field.prime import PrimeField
from gpu.pool.pinned import PinnedPool
from gpu.procs import executor as process_executor
from gpu.procs import lifeline, worker_blocks
from gpu.procs import preload as synthesis_preload
from gpu.procs.executor import ProcessSynthesizer
from gpu.procs.lifeline import SYNTHESIS_PROCESS_NAME
from gpu.reference import cpu_backend
from gpu.reference.synthesis import synthesize
from gpu.shm.blocks import remove_stale_blocks
from gpu.workload import GpuNttWorkload
from pacer.workload import PartitionSpec
from tests.kept_pools import shared, shm_exists
from tests.pool_holder import kill_holder, start_synthesis_holder
from tests.processes import (
    descendants,
    mapping_blocks_of,
    parent_of,
    wait_until_gone,
)


@pytest.fixture(scope="module")
def synthesizer() -> Iterator[ProcessSynthesizer]:
    with ProcessSynthesizer(2) as started:
        yield started


@pytest.mark.parametrize("log_n", [0, 5, 19], ids=lambda n: f"2^{n}")
@pytest.mark.slow
def test_a_worker_process_writes_the_slot_the_parent_reads(
    synthesizer: ProcessSynthesizer, log_n: int, shm_dir: str
) -> None:
    with PinnedPool.build(2, [(1 << log_n,)] * 3, np.uint32, backend=shared(shm_dir)) as pool:
        for index in range(3):  # the same slots again: the workers map each block once
            with pool.checkout() as slot:
                synthesizer.fill(pool.slot_block(slot), seed=5, index=index)
                expected = synthesize(5, index, log_n)
                assert all((s == e).all() for s, e in zip(slot.arrays, expected, strict=True))


def faults_of_two_fills(block: object, seed: int) -> tuple[int, int]:
    """In a worker process: the minor page faults each of two fills of one slot takes."""
    faults = []
    for index in range(2):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        process_executor._fill(block, seed, index, BABYBEAR, "numpy", index + 1)  # type: ignore[arg-type]
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return faults[0], faults[1]


def kernel_populates() -> bool:
    """Whether this kernel fills in page tables on request (MADV_POPULATE_READ, Linux 5.14+)."""
    with mmap.mmap(-1, mmap.PAGESIZE) as probe:
        try:
            probe.madvise(worker_blocks.MADV_POPULATE_READ)
        except OSError:
            return False
    return True


@pytest.mark.skipif(not kernel_populates(), reason="the kernel lacks MADV_POPULATE_READ")
@pytest.mark.parametrize("at_start", [True, False], ids=["blocks-given", "no-blocks"])
@pytest.mark.slow
def test_workers_fill_in_every_blocks_page_tables_when_they_start(
    at_start: bool, caplog: pytest.LogCaptureFixture, shm_dir: str
) -> None:
    caplog.set_level(logging.INFO, logger="gpu.procs.executor")
    log_n = 21  # a 24 MiB slot, 6,144 pages
    pages = 3 * 4 * (1 << log_n) // mmap.PAGESIZE
    with PinnedPool.build(1, [(1 << log_n,)] * 3, np.uint32, backend=shared(shm_dir)) as pool:
        names = pool.block_paths if at_start else ()
        assert len(pool.block_names) == 1
        with ProcessSynthesizer(1, names) as synthesizer, pool.checkout() as slot:
            first, second = synthesizer._executor.submit(
                faults_of_two_fills, pool.slot_block(slot), 4
            ).result()
            assert (slot.arrays[2] == synthesize(4, 1, log_n)[2]).all()
    # The second fill faults only for synthesis's own buffers; so does the first, unless it
    # is the one that maps the block and fills in its page tables.
    messages = [record.getMessage() for record in caplog.records]
    started = [message for message in messages if "synthesis processes ready" in message]
    if at_start:
        assert first - second < pages // 2
        assert len(started) == 1
        assert "1 of them filled in the page tables of the pool's 1 slot blocks" in started[0]
    else:
        assert first - second >= pages // 2


@pytest.mark.slow
def test_threads_fill_slots_through_the_processes_at_once(
    synthesizer: ProcessSynthesizer, shm_dir: str
) -> None:
    with PinnedPool.build(4, [(1 << 12,)] * 3, np.uint32, backend=shared(shm_dir)) as pool:
        slots = [pool.checkout() for _ in range(4)]
        threads = [
            threading.Thread(target=synthesizer.fill, args=(pool.slot_block(s), 9, i))
            for i, s in enumerate(slots)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, slot in enumerate(slots):
            assert (slot.arrays[2] == synthesize(9, i, 12)[2]).all()
            slot.release()


@pytest.mark.slow
def test_a_slot_outside_shared_memory_is_refused(synthesizer: ProcessSynthesizer) -> None:
    with (
        PinnedPool.build(1, [(8,)] * 3, np.uint32, backend="numpy") as pool,
        pool.checkout() as slot,
    ):
        assert pool.slot_block(slot) is None
        with pytest.raises(ValueError, match="not in shared memory"):
            synthesizer.fill(pool.slot_block(slot), 1, 0)


def test_shared_blocks_are_unlinked_when_the_pool_closes(shm_dir: str) -> None:
    pool = PinnedPool.build(3, [(64,)] * 3, np.uint32, backend=shared(shm_dir), on_empty="fallback")
    slot = pool.checkout()
    block = pool.slot_block(slot)
    assert block is not None
    assert shm_exists(shm_dir, block.name)
    assert block.shapes == ((64,),) * 3
    others = [pool.checkout(), pool.checkout()]
    fallback = pool.checkout()  # every slot is out: pageable memory, which no process can map
    assert fallback.index is None
    assert pool.slot_block(fallback) is None
    for held in [slot, *others, fallback]:
        held.release()
    pool.close()
    assert not shm_exists(shm_dir, block.name)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.slow
def test_the_gpu_workload_synthesizes_in_processes_and_frees_them(
    backend: str, shm_dir: str
) -> None:
    workload = GpuNttWorkload(10, [0], 1, "fallback", executor="processes", pool_backend="shared",
                              field="goldilocks", backend=backend, shm_dir=shm_dir)  # fmt: skip
    workload.prepare(slots=2, budget_bytes=2**30, synthesis_workers=2)
    try:
        specs = [PartitionSpec("job", i, 77, {}) for i in range(3)]
        slots = [workload.synthesize(spec) for spec in specs]  # the third is a fallback
        assert [s.index is None for s in slots] == [False, False, True]
        for spec, slot in zip(specs, slots, strict=True):
            expected = synthesize(spec.seed, spec.index, 10, field=workload.field)
            assert all((a == e).all() for a, e in zip(slot.arrays, expected, strict=True))
            workload.release(slot)
        assert workload.pool is not None
        block = workload.pool.slot_block(workload.pool.checkout())
        assert block is not None
        assert shm_exists(shm_dir, block.name)
    finally:
        workload.close()
    assert not shm_exists(shm_dir, block.name)


@pytest.mark.slow
def test_a_killed_worker_is_replaced_and_the_synthesis_starts_over(
    caplog: pytest.LogCaptureFixture, shm_dir: str
) -> None:
    with (
        PinnedPool.build(1, [(256,)] * 3, np.uint32, backend=shared(shm_dir)) as pool,
        ProcessSynthesizer(2) as synthesizer,
        pool.checkout() as slot,
    ):
        block = pool.slot_block(slot)
        synthesizer.fill(block, 5, 0)
        for worker in list(synthesizer._executor._processes.values()):  # the OOM killer
            assert worker.pid is not None
            with contextlib.suppress(ProcessLookupError):  # the executor may end it first
                os.kill(worker.pid, signal.SIGKILL)
            worker.join()
        slot.arrays[2][:] = 0
        with caplog.at_level(logging.ERROR, logger="gpu.procs.executor"):
            synthesizer.fill(block, 5, 1)
        expected = synthesize(5, 1, 8)
        assert all((a == e).all() for a, e in zip(slot.arrays, expected, strict=True))
        assert synthesizer.restarts == 1
        assert "a synthesis worker process died" in caplog.text
        synthesizer.fill(block, 5, 2)  # the new set keeps working
        assert synthesizer.restarts == 1


# --- the workers end with the service ---------------------------------------------------------


@pytest.mark.slow
def test_synthesis_processes_end_when_their_service_is_killed(shm_dir: str) -> None:
    holder, _, _ = start_synthesis_holder()
    try:
        tree = descendants(holder.pid)
        # The forkserver, the resource tracker and the workers: named once they have started.
        assert len(tree) >= 3
        assert SYNTHESIS_PROCESS_NAME in [name for name, _ in tree.values()]
        assert mapping_blocks_of(holder.pid) == []  # its own, while it lives
    finally:
        kill_holder(holder)
    wait_until_gone(tree, holder.pid)
    remove_stale_blocks(shm_dir)


@pytest.mark.slow
def test_synthesis_processes_end_when_the_forkserver_is_killed(shm_dir: str) -> None:
    holder, _, forkserver = start_synthesis_holder()
    assert holder.stdin is not None
    assert holder.stdout is not None
    try:
        tree = descendants(holder.pid)
        workers = {pid: seen for pid, seen in tree.items() if seen[0] == SYNTHESIS_PROCESS_NAME}
        assert {parent_of(pid) for pid in workers} == {forkserver}
        os.kill(forkserver, signal.SIGKILL)  # the service lives on
        wait_until_gone(workers, holder.pid, what="the synthesis processes to end with their "
                        "forkserver")  # fmt: skip
        holder.stdin.write("fill\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == "restarts 1\n"  # a new set, from a new forkserver
        tree = descendants(holder.pid)
    finally:
        kill_holder(holder)
    wait_until_gone(tree, holder.pid)
    remove_stale_blocks(shm_dir)


@pytest.mark.slow
def test_the_start_log_says_how_the_workers_are_tied_to_the_service(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="gpu.procs.executor"), ProcessSynthesizer(1):
        pass
    assert f"synthesis processes ({SYNTHESIS_PROCESS_NAME}) end with this process" in caplog.text
    assert "each is killed should the forkserver die (PR_SET_PDEATHSIG)" in caplog.text


@pytest.mark.slow
def test_a_cut_lifeline_ends_the_child_watching_it() -> None:
    line = lifeline.Lifeline.open()
    code = (
        "import sys\n"
        "from multiprocessing.connection import Connection\n"
        "from gpu.procs import lifeline\n"
        "lifeline.watch(Connection(int(sys.argv[1]), writable=False))\n"
        "print('watching', flush=True)\n"
        "import time\n"
        "time.sleep(30)\n"
    )
    reader = line.reader.fileno()
    with subprocess.Popen(
        [sys.executable, "-c", code, str(reader)], stdout=subprocess.PIPE, text=True,
        pass_fds=[reader],
    ) as child:  # fmt: skip
        assert child.stdout is not None
        assert child.stdout.readline() == "watching\n"
        line.cut()
        assert child.wait(5) == lifeline.EXIT_ORPHANED


FORKSERVER_OF_COMPILED_SYNTHESIS = """
import sys
from multiprocessing import forkserver
from gpu.field.goldilocks import GOLDILOCKS
from gpu.procs.executor import ProcessSynthesizer
with ProcessSynthesizer(1, backend=sys.argv[1], field=GOLDILOCKS) as synthesizer:
    pid = forkserver._forkserver._forkserver_pid
    with open(f"/proc/{pid}/maps") as maps:
        print("llvmlite" in maps.read())
"""


@pytest.mark.skipif(not cpu_backend.numba_available(), reason="Numba is not installed")
@pytest.mark.parametrize(("backend", "preloaded"), [("numba", True), ("numpy", False)])
@pytest.mark.slow
def test_the_forkserver_of_compiled_synthesis_holds_the_kernels_its_workers_fork_with(
    backend: str, preloaded: bool
) -> None:
    # Numba's compiler library is mapped in the forkserver itself: what it loaded before its
    # first fork, every worker starts with. NumPy synthesis loads nothing there.
    ran = subprocess.run([sys.executable, "-c", FORKSERVER_OF_COMPILED_SYNTHESIS, backend],
                         capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    assert ran.stdout.split() == [str(preloaded)]


@pytest.mark.skipif(not cpu_backend.numba_available(), reason="Numba is not installed")
@pytest.mark.parametrize(
    ("field", "loaded"),
    [(GOLDILOCKS, "True False"), (BABYBEAR, "False True"), (None, "True True")],
)
@pytest.mark.slow
def test_the_preload_loads_the_synthesis_kernel_of_the_field_in_use(
    field: PrimeField | None, loaded: str
) -> None:
    # The other field's would be seconds of a core beside the pool's pinning, for nothing.
    code = (
        f"import {synthesis_preload.module_for(field)}\n"
        "from gpu.reference import cpu_backend\n"
        "kernels = cpu_backend._kernels()\n"
        "print(*(bool(kernels[name].signatures) for name in ('goldilocks', 'babybear')))\n"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    assert ran.stdout.split() == loaded.split()
