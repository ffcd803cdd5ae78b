"""A proof checked on the CPU, in a replay: read from the journal or a trace, its memory held
until a verify thread has checked it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench.tune_fidelity import replay_rate, run_span
from pacer.control.baselines import Unpaced
from pacer.journal.records import PartitionResult
from pacer.journal.sqlite import SqliteJournal
from pacer.sim.engine import Replay, Simulation
from pacer.sim.recording import RecordingError, read_journal, read_trace
from pacer.sim.replay import HostShape, scenario_for


def run(
    replay: Replay, verify_threads: int = 1, slots: int = 8
) -> tuple[float, list[tuple[float, int]]]:
    """Replay ``replay`` unpaced on one GPU worker and ``slots`` synthesis workers: when the
    last partition was done, and (time, partitions in flight) after each event."""
    host = HostShape(1, slots, 1, 100, 1, verify_threads=verify_threads)
    scenario = scenario_for(replay, host)
    raw = Simulation(scenario, "unpaced", lambda clock: Unpaced(scenario.memory_slots),
                     replay).run()  # fmt: skip
    assert raw.completed == sum(replay.job_sizes)
    return raw.end_s, list(zip(raw.trace.t, raw.trace.inflight, strict=True))


def held_at(trace: list[tuple[float, int]], t: float) -> int:
    """Partitions in flight just after ``t`` (s)."""
    return [n for at, n in trace if at <= t][-1]


def test_a_checked_proof_holds_its_memory_until_its_check_ends() -> None:
    # Two partitions, both synthesized by 1 s; the GPU proves them at 1-2 and 2-3. The first is
    # checked for 5 s: it is done at 7 s, not 2 s, and holds its memory until then.
    checks = Replay((0.0,), (2,), np.array([1.0, 1.0]), np.array([1.0, 1.0]),
                    np.array([5.0, 0.0]))  # fmt: skip
    end_s, trace = run(checks)
    assert end_s == pytest.approx(7.0)
    assert held_at(trace, 3.5) == 1  # the second is done; the first is being checked
    plain_end, plain = run(Replay((0.0,), (2,), np.ones(2), np.ones(2)))
    assert plain_end == pytest.approx(3.0)
    assert held_at(plain, 2.5) == 1
    assert held_at(plain, 3.5) == 0


def test_checks_wait_for_a_verify_thread_in_the_order_the_gpu_work_ended() -> None:
    # Both checked for 5 s: on one thread the second waits for the first (done at 2 + 5 and
    # then 7 + 5), on two they run side by side (7 and 8).
    replay = Replay((0.0,), (2,), np.ones(2), np.ones(2), np.array([5.0, 5.0]))
    one_end, one = run(replay, verify_threads=1)
    two_end, two = run(replay, verify_threads=2)
    assert (one_end, two_end) == pytest.approx((12.0, 8.0))
    assert held_at(one, 7.5) == 1
    assert held_at(two, 7.5) == 1
    assert held_at(one, 3.5) == 2
    assert held_at(two, 3.5) == 2


def test_checks_take_turns_on_the_synthesis_workers_where_they_have_no_threads_of_their_own() -> (
    None
):
    # One synthesis worker; three partitions dispatched at 0, synthesized at 0-1, 1-2 and 2-3;
    # the first proved at 1-2 and checked for 5 s. With no verify thread its check waits for
    # the worker behind the third synthesis, handed to it first: 3-8, not 2-7.
    replay = Replay((0.0,), (3,), np.ones(3), np.ones(3), np.array([5.0, 0.0, 0.0]))
    shared_end, shared = run(replay, verify_threads=0, slots=1)
    own_end, _ = run(replay, verify_threads=1, slots=1)
    assert (shared_end, own_end) == pytest.approx((8.0, 7.0))
    assert held_at(shared, 7.5) == 1


def test_a_replay_refuses_a_negative_check_or_one_of_another_length() -> None:
    with pytest.raises(ValueError, match="verify_s must be 0 or more"):
        Replay((0.0,), (2,), np.ones(2), np.ones(2), np.array([-1.0, 0.0]))
    with pytest.raises(ValueError, match="2 durations"):
        Replay((0.0,), (2,), np.ones(2), np.ones(2), np.ones(3))


def test_a_journal_reads_the_checks_it_recorded_and_replays_them_with_their_partitions(
    tmp_path: Path,
) -> None:
    # The service journals a check's seconds as the phase "verify", only where it checked.
    path, now = tmp_path / "journal.sqlite", [1000.0]
    with SqliteJournal(path, lambda: now[0]) as store:
        job = store.add_job(3, "noop", {})
        now[0] = 1010.0
        store.complete_partitions([
            PartitionResult(job.id, 0, "d0", 2.0, 0.1, {"verify": 0.75}),
            PartitionResult(job.id, 1, "d1", 3.0, 0.2, {"intt": 0.05}),
            PartitionResult(job.id, 2, "d2", 4.0, 0.3, {"verify": 0.25}),
        ])  # fmt: skip
    recording = read_journal(path)
    assert recording.verify_s is not None
    assert recording.verify_s.tolist() == [0.75, 0.0, 0.25]
    assert recording.describe().endswith("; 2 checked on the CPU (mean 0.5 s)")
    replay = recording.replay()
    assert replay.verify_s is not None
    assert replay.verify_s.tolist() == [0.75, 0.0, 0.25]
    for seed in (1, 2, 3):  # redrawn, a check stays with its partition's other durations
        again = recording.replay(seed)
        assert again.verify_s is not None
        pairs = set(zip(again.gpu_s.tolist(), again.verify_s.tolist(), strict=True))
        assert pairs <= {(0.1, 0.75), (0.2, 0.0), (0.3, 0.25)}


def test_a_journal_without_checks_replays_none(tmp_path: Path) -> None:
    path, now = tmp_path / "journal.sqlite", [1000.0]
    with SqliteJournal(path, lambda: now[0]) as store:
        job = store.add_job(1, "noop", {})
        store.complete_partitions([PartitionResult(job.id, 0, "d0", 2.0, 0.1)])
    recording = read_journal(path)
    assert recording.verify_s is None
    assert recording.replay().verify_s is None
    assert "checked" not in recording.describe()


def test_a_trace_takes_its_checks_from_the_column_verify_s(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("synthesis_s,gpu_s,verify_s\n2.5,0.2,1.0\n1.5,0.1,0\n")
    recording = read_trace(path)
    assert recording.verify_s is not None
    assert recording.verify_s.tolist() == [1.0, 0.0]
    assert recording.describe().endswith("; 1 checked on the CPU (mean 1 s)")
    path.write_text("synthesis_s,gpu_s,verify_s\n2.5,0.2,-1\n")
    with pytest.raises(RecordingError, match="line 2: verify_s must be a number of seconds >= 0"):
        read_trace(path)


@pytest.mark.parametrize("name", ["default", "every20"])
def test_an_h100_runs_recording_replays_at_the_runs_pace_only_with_its_checks(name: str) -> None:
    # Two runs on an H100 host (16 processes, Goldilocks 2^27), written out by
    # bench.journal_trace: their last partition was checked for about 8.6 s on the CPU.
    path = Path(__file__).parents[2] / "bench" / "recordings"
    recording = read_trace(path / f"h100-goldilocks-16-checks-{name}.csv")
    host = HostShape(2, 16, 1, 96 << 30, 3 << 30, verify_threads=1)
    run = len(recording) / run_span(recording)
    checked = replay_rate(recording, host, "pi", queued=True)
    plain = replay_rate(replace(recording, verify_s=None), host, "pi", queued=True)
    assert abs(checked / run - 1) < 0.02
    assert plain / run - 1 > 0.04
