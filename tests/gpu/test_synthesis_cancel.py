"""A fill cancelled at any moment from its token to its return never runs on (no GPU).

Each test puts a fill exactly where it means to with a real worker process that stops itself
(SIGSTOP) at that point of its fill (`stop_at`), cancels it there, and lets it go on.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from gpu.field.babybear import BABYBEAR
from gpu.pool.pinned import PinnedPool
from gpu.pool.slots import Slot
from gpu.procs import executor as process_executor
from gpu.procs.executor import ProcessSynthesizer, SynthesisCancelled
from gpu.procs.fill_table import FillTable
from gpu.reference.synthesis import synthesize
from gpu.workload import GpuNttWorkload
from pacer.workload import PartitionSpec
from tests.kept_pools import shared
from tests.processes import descendants, running, state_of
from tests.waits import wait_until

pytestmark = pytest.mark.slow

LOG_N = 8
OneWorker = tuple[ProcessSynthesizer, PinnedPool, ThreadPoolExecutor]


def stop_at(step: str, when: str = "before", nth: int = 1) -> None:
    """In a worker process: stop the process (SIGSTOP) ``when`` ("before" or "after") the
    ``nth`` call from now of ``step``: the worker's ``_fill``, ``synthesize_into``, or a
    `FillTable` method. Let go (SIGCONT), it goes on as before."""
    owner: Any = FillTable if hasattr(FillTable, step) else process_executor
    original = getattr(owner, step)
    calls = itertools.count(1)

    def stopping(*args: object, **kwargs: object) -> object:
        stops = next(calls) == nth
        if stops:
            setattr(owner, step, original)
        if stops and when == "before":
            os.kill(os.getpid(), signal.SIGSTOP)
        result = original(*args, **kwargs)
        if stops and when == "after":
            os.kill(os.getpid(), signal.SIGSTOP)
        return result

    setattr(owner, step, stopping)


def the_worker(synthesizer: ProcessSynthesizer) -> int:
    (pid,) = (synthesizer._executor._processes or {}).keys()
    return int(pid)


def wait_until_stopped(pid: int) -> None:
    wait_until(lambda: state_of(pid), f"worker {pid} to stop", done=lambda state: state == "T")


def let_go(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # killed by the cancel
        os.kill(pid, signal.SIGCONT)


def gone(pid: int) -> bool:
    return state_of(pid) in {None, "Z"}


def stopped_processes() -> list[str]:
    return [seen for seen in running(descendants(os.getpid())).values() if seen.endswith("(T)")]


def holds(slot: Slot, index: int) -> bool:
    expected = synthesize(5, index, LOG_N)
    return all((a == e).all() for a, e in zip(slot.arrays, expected, strict=True))


def cleared(slot: Slot) -> bool:
    return all(not array.any() for array in slot.arrays)


@pytest.fixture
def one_worker(shm_dir: str) -> Iterator[OneWorker]:
    """A synthesizer of one worker, a pool of two slots, and threads to call `fill` on."""
    with (
        PinnedPool.build(2, [(1 << LOG_N,)] * 3, np.uint32, backend=shared(shm_dir)) as pool,
        ProcessSynthesizer(1) as synthesizer,
        ThreadPoolExecutor(2) as callers,
    ):
        yield synthesizer, pool, callers
        assert stopped_processes() == []


def filling(
    synthesizer: ProcessSynthesizer, pool: PinnedPool, callers: ThreadPoolExecutor, slot: Slot,
    index: int, token: int | None = None,
) -> Future[None]:  # fmt: skip
    """`fill` of partition ``index`` into ``slot``, emptied first, on a thread."""
    for array in slot.arrays:
        array[:] = 0
    return callers.submit(synthesizer.fill, pool.slot_block(slot), 5, index, BABYBEAR, token)


def still_fills(synthesizer: ProcessSynthesizer, pool: PinnedPool, restarts: int) -> None:
    """The set (the same, or the new one) fills the next partition right, with no restart."""
    with pool.checkout() as slot:
        synthesizer.fill(pool.slot_block(slot), 5, 9)
        assert holds(slot, 9)
    assert synthesizer.restarts == restarts


# --- before a worker takes it ----------------------------------------------------------------


def test_a_fill_cancelled_before_it_is_asked_for_reaches_no_worker(
    one_worker: OneWorker, caplog: pytest.LogCaptureFixture
) -> None:
    synthesizer, pool, _ = one_worker
    worker = the_worker(synthesizer)
    token = synthesizer.token("0 of job j")
    assert synthesizer.token_of("0 of job j") == token
    with caplog.at_level(logging.ERROR, logger="gpu.procs.executor"):
        assert synthesizer.cancel(token) is None
    assert caplog.messages == [
        "the synthesis of partition 0 of job j was cancelled: no worker process is running it, "
        "and none will begin it"
    ]
    assert synthesizer.token_of("0 of job j") is None  # cancelled: not the one to cancel now
    assert synthesizer.cancel(token) is None  # once
    with pool.checkout() as slot:
        for array in slot.arrays:
            array[:] = 0
        with pytest.raises(SynthesisCancelled, match="partition 0 of job j was cancelled"):
            synthesizer.fill(pool.slot_block(slot), 5, 0, BABYBEAR, token)
        assert cleared(slot)
        with pytest.raises(ValueError, match=f"token {token} was not taken"):  # one fill a token
            synthesizer.fill(pool.slot_block(slot), 5, 0, BABYBEAR, token)
    still_fills(synthesizer, pool, restarts=0)
    assert the_worker(synthesizer) == worker


def test_a_fill_cancelled_while_queued_is_skipped_and_its_worker_goes_on(
    one_worker: OneWorker,
) -> None:
    synthesizer, pool, callers = one_worker
    worker = the_worker(synthesizer)
    synthesizer._executor.submit(stop_at, "synthesize_into").result()
    with pool.checkout() as first, pool.checkout() as second:
        ahead = filling(synthesizer, pool, callers, first, 0)
        wait_until_stopped(worker)  # in the fill ahead, the one worker there is
        token = synthesizer.token("1 of job j")
        queued = filling(synthesizer, pool, callers, second, 1, token)
        wait_until(lambda: len(synthesizer._executor._pending_work_items), "the fill queued",
                   done=lambda pending: pending == 2)  # fmt: skip
        assert synthesizer.cancel(token) is None
        let_go(worker)
        ahead.result(timeout=30)
        with pytest.raises(SynthesisCancelled):
            queued.result(timeout=30)
        assert holds(first, 0)  # the fill ahead, on the same worker, untouched
        assert cleared(second)
    still_fills(synthesizer, pool, restarts=0)
    assert the_worker(synthesizer) == worker


# --- in its worker, at each step --------------------------------------------------------------

# Where the worker stops, what the cancel finds, and what the fill had written by then.
WINDOWS = [
    pytest.param("_fill", "before", "skipped", False, id="taken-not-checked"),
    pytest.param("record", "before", "ends-itself", False, id="checked-not-recorded"),
    pytest.param("record", "after", "killed", False, id="recorded-not-checked"),
    pytest.param("synthesize_into", "before", "killed", False, id="checked-not-synthesizing"),
    pytest.param("clear", "before", "killed", True, id="synthesized-not-cleared"),
    pytest.param("clear", "after", "ends-itself", True, id="cleared-not-checked"),
    pytest.param("_fill", "after", "done", True, id="done-not-returned"),
]


@pytest.mark.parametrize(("step", "when", "outcome", "written"), WINDOWS)
def test_a_fill_cancelled_in_its_worker_at_any_step_fails_and_does_not_run_on(
    one_worker: OneWorker, step: str, when: str, outcome: str, written: bool
) -> None:
    """Before its record the worker skips it and goes on; from its record to its last look at
    the mark, the worker ends (killed, or by itself where the cancel did not see the record);
    after, the result is dropped. Either way the fill fails and nothing else restarts."""
    synthesizer, pool, callers = one_worker
    worker = the_worker(synthesizer)
    synthesizer._executor.submit(stop_at, step, when).result()
    with pool.checkout() as slot:
        token = synthesizer.token("0 of job j")
        fill = filling(synthesizer, pool, callers, slot, 0, token)
        wait_until_stopped(worker)
        assert not fill.done()
        assert synthesizer.cancel(token) == (worker if outcome == "killed" else None)
        let_go(worker)
        with pytest.raises(SynthesisCancelled, match="partition 0 of job j was cancelled"):
            fill.result(timeout=30)
        assert holds(slot, 0) if written else cleared(slot)
    ended = outcome in {"killed", "ends-itself"}
    assert gone(worker) == ended
    still_fills(synthesizer, pool, restarts=int(ended))
    assert (the_worker(synthesizer) == worker) != ended


def test_a_worker_whose_record_the_cancel_read_takes_no_other_fill(
    one_worker: OneWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancel reads the record, then the fill finishes and its worker would take the next
    fill before the kill lands: it ends itself instead, so the kill hits no other fill."""
    synthesizer, pool, callers = one_worker
    worker = the_worker(synthesizer)
    synthesizer._executor.submit(stop_at, "clear").result()
    with pool.checkout() as slot, pool.checkout() as next_slot:
        token = synthesizer.token("0 of job j")
        fill = filling(synthesizer, pool, callers, slot, 0, token)
        wait_until_stopped(worker)
        next_fill = filling(synthesizer, pool, callers, next_slot, 1)
        wait_until(lambda: len(synthesizer._executor._pending_work_items), "the next fill",
                   done=lambda pending: pending == 2)  # fmt: skip
        read: Callable[[int], int | None] = synthesizer.worker_of

        def read_then_let_the_fill_finish(token: int) -> int | None:
            pid = read(token)
            let_go(worker)
            wait_until(lambda: gone(worker), "the worker to end itself, the next fill untaken")
            return pid

        monkeypatch.setattr(synthesizer, "worker_of", read_then_let_the_fill_finish)
        assert synthesizer.cancel(token) == worker
        with pytest.raises(SynthesisCancelled):
            fill.result(timeout=30)
        next_fill.result(timeout=30)  # started over once, on the new set
        assert holds(next_slot, 1)
    assert synthesizer.restarts == 1


# --- a fill that hangs ------------------------------------------------------------------------


def test_a_cancelled_fill_kills_its_stopped_worker_and_fails_without_starting_over(
    one_worker: OneWorker, caplog: pytest.LogCaptureFixture
) -> None:
    synthesizer, pool, callers = one_worker
    worker = the_worker(synthesizer)
    synthesizer._executor.submit(stop_at, "synthesize_into").result()  # it hangs there
    with pool.checkout() as slot:
        token = synthesizer.token("0 of job j")
        fill = filling(synthesizer, pool, callers, slot, 0, token)
        wait_until_stopped(worker)
        assert synthesizer.worker_of(token) == worker
        with caplog.at_level(logging.ERROR, logger="gpu.procs.executor"):
            assert synthesizer.cancel(token) == worker
            with pytest.raises(SynthesisCancelled, match="partition 0 of job j was cancelled"):
                fill.result(timeout=30)
    assert synthesizer.restarts == 1
    cancelled = [message for message in caplog.messages if "was cancelled" in message]
    assert cancelled == [
        f"the synthesis of partition 0 of job j was cancelled: killed its worker process "
        f"(pid {worker}); a new set of 1 replaces it"
    ]
    assert state_of(worker) in {None, "Z"}
    assert synthesizer.cancel(token) is None  # done: nothing left to cancel
    still_fills(synthesizer, pool, restarts=1)  # the new set, whose worker was never told to stop


# --- the GPU workload -------------------------------------------------------------------------


@pytest.fixture
def workload(shm_dir: str) -> Iterator[GpuNttWorkload]:
    """The GPU workload with one synthesis process and one slot (no GPU: shared memory)."""
    made = GpuNttWorkload(LOG_N, [0], 1, "wait", executor="processes", pool_backend="shared",
                          field="goldilocks", shm_dir=shm_dir)  # fmt: skip
    made.prepare(slots=1, budget_bytes=2**30, synthesis_workers=1)
    try:
        yield made
    finally:
        made.close()


def right(workload: GpuNttWorkload, spec: PartitionSpec, slot: Slot) -> bool:
    expected = synthesize(spec.seed, spec.index, LOG_N, field=workload.field)
    return all((a == e).all() for a, e in zip(slot.arrays, expected, strict=True))


def test_the_gpu_workload_cancels_a_synthesis_abandoned_and_its_slot_comes_back(
    workload: GpuNttWorkload,
) -> None:
    synthesizer, pool = workload._synthesizer, workload.pool
    assert synthesizer is not None
    assert pool is not None
    worker = the_worker(synthesizer)
    synthesizer._executor.submit(stop_at, "synthesize_into").result()
    spec = PartitionSpec("job", 3, 77, {})
    with ThreadPoolExecutor(1) as caller:
        synthesizing = caller.submit(workload.synthesize, spec)
        token = wait_until(lambda: synthesizer.token_of("3 of job job"), "the fill's token")
        assert token is not None
        wait_until_stopped(worker)
        workload.abandoned(spec, "prove")  # not a synthesis: nothing to stop
        workload.abandoned(PartitionSpec("job", 4, 77, {}), "synthesize")  # none running
        assert (synthesizer.worker_of(token), synthesizer.restarts) == (worker, 0)
        workload.abandoned(spec, "synthesize")
        with pytest.raises(SynthesisCancelled):
            synthesizing.result(timeout=30)
    assert (pool.slots_free, synthesizer.restarts, workload.synthesis_restarts) == (1, 1, 1)
    slot = workload.synthesize(spec)  # on the new set
    assert right(workload, spec, slot)
    workload.release(slot)


def test_a_synthesis_abandoned_before_its_fill_is_cancelled_when_it_comes_and_not_its_retry(
    workload: GpuNttWorkload,
) -> None:
    """Abandoned before its call reached its fill (not begun, or waiting for a slot): that call
    is cancelled once it gets there, and the partition's retry, an equal spec, runs."""
    synthesizer, pool = workload._synthesizer, workload.pool
    assert synthesizer is not None
    assert pool is not None
    spec, retry = PartitionSpec("job", 3, 77, {}), PartitionSpec("job", 3, 77, {})
    workload.abandoned(spec, "synthesize")  # its call has not begun
    slot = workload.synthesize(retry)
    assert right(workload, retry, slot)
    with ThreadPoolExecutor(1) as caller:
        waiting = caller.submit(workload.synthesize, spec)  # for the one slot, held
        workload.release(slot)
        with pytest.raises(SynthesisCancelled, match="partition 3 of job job was cancelled"):
            waiting.result(timeout=30)
    assert (pool.slots_free, synthesizer.restarts) == (1, 0)
    held = PartitionSpec("job", 4, 77, {})  # abandoned, and its call never comes
    with ThreadPoolExecutor(1) as caller:
        slot = workload.synthesize(retry)
        waiting = caller.submit(workload.synthesize, held)  # for the one slot, held
        workload.abandoned(held, "synthesize")  # waiting for a slot, before its fill
        workload.release(slot)
        with pytest.raises(SynthesisCancelled, match="partition 4 of job job was cancelled"):
            waiting.result(timeout=30)
    never = PartitionSpec("job", 5, 77, {})
    workload.abandoned(never, "synthesize")
    assert len(workload._abandoned_early) == 1
    del never  # the pipeline lets go of a call that never came: so does the workload
    assert workload._abandoned_early == {}
    slot = workload.synthesize(retry)
    assert right(workload, retry, slot)
    workload.release(slot)
