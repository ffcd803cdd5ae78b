"""`pacer tune`'s parts: recordings read from a real journal file (written by the journal's own
API) and from CSV traces, split by time and replayed; the grid checked by the settings model;
the frontier and the goals; and tuned settings that beat the defaults where they should."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench.tune_trace import HOST, trace
from pacer.config import ControllerSettings, Settings
from pacer.control.policy import Decision, Mode, Observation, SynthesisParts
from pacer.journal.records import PartitionResult
from pacer.journal.sqlite import SqliteJournal
from pacer.sim.engine import Replay, Simulation
from pacer.sim.recording import Recording, RecordingError, read_journal, read_trace
from pacer.sim.replay import HostShape, Outcome, evaluate, scenario_for, waiting_busy
from pacer.sim.sweep import (
    DEFAULT_KI,
    Goal,
    GoalError,
    Grid,
    GridError,
    Point,
    default_grid,
    frontier,
    near_balance,
    parse_grid,
    wide_spread,
)
from pacer.sim.tuning import tune

GIB = 2**30
H200 = HostShape(workers=2, cores=32, threads_per_synthesis=1, budget_bytes=300 * GIB,
                 partition_bytes=3 * GIB)  # fmt: skip


class Clock:
    """Wall-clock seconds the test sets: when a job is accepted, when results commit."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def journal(tmp_path: Path) -> tuple[Path, Clock]:
    """A journal file with two jobs of 4 partitions: the first accepted at 1000 and proved at
    1010 (two) and 1020 (two), the second accepted at 1015 and proved at 1030."""
    path, clock = tmp_path / "journal.sqlite", Clock(1000.0)
    with SqliteJournal(path, clock) as store:
        first = store.add_job(4, "noop", {})
        clock.now = 1010.0
        store.complete_partitions(
            [PartitionResult(first.id, i, f"d{i}", 1.0 + i, 0.1 * (i + 1)) for i in (0, 1)]
        )
        clock.now = 1015.0
        second = store.add_job(4, "noop", {})
        clock.now = 1020.0
        store.complete_partitions(
            [PartitionResult(first.id, i, f"d{i}", 1.0 + i, 0.1 * (i + 1)) for i in (2, 3)]
        )
        clock.now = 1030.0
        store.complete_partitions(
            [PartitionResult(second.id, i, f"e{i}", 5.0, 0.5) for i in range(4)]
        )
    return path, clock


def test_a_journal_reads_back_each_partition_with_its_job_and_times(
    journal: tuple[Path, Clock],
) -> None:
    path, _ = journal
    before = path.read_bytes()
    recording = read_journal(path)
    assert path.read_bytes() == before  # read-only: nothing migrated or written
    assert recording.synthesis_s.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 5.0, 5.0, 5.0]
    assert recording.gpu_s.tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5, 0.5, 0.5, 0.5])
    assert recording.arrival_s.tolist() == [1000.0] * 4 + [1015.0] * 4
    assert recording.end_s.tolist() == [1010.0] * 2 + [1020.0] * 2 + [1030.0] * 4
    assert recording.jobs == 2
    replay = recording.replay()
    assert (replay.arrivals_s, replay.job_sizes) == ((0.0, 15.0), (4, 4))


def test_a_window_keeps_what_was_committed_in_it_and_starts_jobs_at_its_start(
    journal: tuple[Path, Clock],
) -> None:
    path, _ = journal
    recording = read_journal(path, since=1015.0, until=1030.0)
    assert recording.end_s.tolist() == [1020.0, 1020.0]
    assert recording.replay().arrivals_s == (0.0,)  # the job accepted at 1000 waits at 1015


def test_an_empty_window_names_the_flags_and_what_the_journal_holds(
    journal: tuple[Path, Clock],
) -> None:
    path, _ = journal
    with pytest.raises(RecordingError) as caught:
        read_journal(path, since=2000.0)
    message = str(caught.value)
    assert "no partition completed in the window (--since, --until, --last)" in message
    assert "it holds 8 completed partitions, committed 1970-01-01 00:16:50 UTC" in message


def test_a_journal_replays_each_synthesis_less_its_recorded_wait_for_a_worker(
    tmp_path: Path,
) -> None:
    # The service journals the wait as the phase "synthesis_wait"; rows written before it
    # did (no such phase) replay as recorded.
    path, clock = tmp_path / "journal.sqlite", Clock(1000.0)
    with SqliteJournal(path, clock) as store:
        job = store.add_job(3, "noop", {})
        clock.now = 1010.0
        store.complete_partitions([
            PartitionResult(job.id, 0, "d0", 2.0, 0.1, {"intt": 0.05, "synthesis_wait": 0.5}),
            PartitionResult(job.id, 1, "d1", 3.0, 0.1, {"synthesis_wait": 1.5}),
            PartitionResult(job.id, 2, "d2", 4.0, 0.1, {"intt": 0.05}),
        ])  # fmt: skip
    recording = read_journal(path)
    assert recording.synthesis_s.tolist() == [1.5, 1.5, 4.0]
    assert recording.waits == 2
    assert recording.describe().endswith(
        "; synthesis less its wait for a worker (mean 1 s, 2 recorded one)"
    )
    assert recording.replay().synthesis_s.tolist() == [1.5, 1.5, 4.0]


def test_a_trace_replays_each_synthesis_less_its_wait_for_a_worker(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("synthesis_s,gpu_s,synthesis_wait_s\n2.5,0.2,1.0\n1.5,0.1,0\n")
    recording = read_trace(path)
    assert recording.synthesis_s.tolist() == [1.5, 1.5]
    assert recording.describe().endswith("; synthesis less its wait for a worker (mean 0.5 s)")


def test_a_replay_queues_syntheses_for_the_hosts_workers_as_the_service_does() -> None:
    # 32 cores at 2 threads a synthesis: 16 synthesis workers, a dispatch beyond them waits.
    host = HostShape(workers=2, cores=32, threads_per_synthesis=2, budget_bytes=300 * GIB,
                     partition_bytes=3 * GIB)  # fmt: skip
    executor = scenario_for(recording_of(40).replay(), host).synthesis.executor
    assert executor is not None
    assert executor.processes == 16


def test_a_journal_that_is_not_there_is_refused_and_not_created(tmp_path: Path) -> None:
    with pytest.raises(RecordingError, match="no such file"):
        read_journal(tmp_path / "typo.sqlite")
    assert not (tmp_path / "typo.sqlite").exists()


def test_a_trace_takes_its_columns_in_any_order_with_defaults(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("gpu_s,synthesis_s,bytes\n0.2,1.5,3GiB\n0.1,2.5,1GiB\n\n")
    recording = read_trace(path)
    assert recording.synthesis_s.tolist() == [1.5, 2.5]
    assert recording.gpu_s.tolist() == [0.2, 0.1]
    assert recording.mean_bytes == 2 * GIB
    replay = recording.replay()  # no arrival_s: one job, waiting at the start
    assert (replay.arrivals_s, replay.job_sizes) == ((0.0,), (2,))


def test_a_trace_groups_jobs_by_label_and_arrival_and_orders_by_end(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "synthesis_s,gpu_s,arrival_s,job,end_s\n"
        "1,0.1,10,b,40\n2,0.2,0,a,30\n3,0.3,0,a,20\n4,0.4,10,c,50\n"
    )
    recording = read_trace(path)
    assert recording.end_s.tolist() == [20.0, 30.0, 40.0, 50.0]
    replay = recording.replay()
    assert (replay.arrivals_s, replay.job_sizes) == ((0.0, 10.0, 10.0), (2, 1, 1))
    assert replay.synthesis_s.tolist() == [3.0, 2.0, 1.0, 4.0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("synthesis_s,gpu_seconds\n1,1\n", "unknown column 'gpu_seconds'; the columns are "),
        ("synthesis_s,arrival_s\n1,1\n", "column 'gpu_s' is missing (required: "),
        ("synthesis_s,gpu_s,gpu_s\n1,1,1\n", "column 'gpu_s' is named twice"),
        ("synthesis_s,gpu_s\n1,-0.5\n", "line 2: gpu_s must be a number of seconds >= 0, "),
        ("synthesis_s,gpu_s\n1,0.1\nx,0.1\n", "line 3: synthesis_s must be a number of seconds"),
        ("synthesis_s,gpu_s,arrival_s\n1,1,inf\n", "arrival_s must be a finite number of "),
        ("synthesis_s,gpu_s,bytes\n1,1,lots\n", "bytes must be a size > 0 (bytes, or with "),
        ("synthesis_s,gpu_s\n1,1,1\n", "line 2: 3 fields; the header names 2"),
        ("synthesis_s,gpu_s\n", "no partitions; each line after the header is one"),
        ("", "empty; its first line names the columns"),
        (
            "synthesis_s,gpu_s,synthesis_wait_s\n1,1,0.5\n\n2,1,2.5\n",
            "line 4: synthesis_wait_s must not exceed synthesis_s (it is the part of it spent "
            "waiting for a worker), got 2.5 of 2",
        ),
    ],
    ids=[
        "unknown",
        "missing",
        "twice",
        "negative",
        "not-a-number",
        "infinite",
        "bytes",
        "fields",
        "no-rows",
        "empty",
        "wait-past-synthesis",
    ],
)
def test_a_bad_trace_is_refused_naming_the_column_and_the_rule(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(RecordingError) as caught:
        read_trace(path)
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"trace {path}")


def recording_of(n: int, end_s: np.ndarray | None = None) -> Recording:
    return Recording(
        source="test", arrival_s=np.zeros(n), job=np.arange(n) // 4,
        end_s=np.arange(n, dtype=float) if end_s is None else end_s,
        synthesis_s=np.linspace(1.0, 2.0, n), gpu_s=np.full(n, 0.1),
    )  # fmt: skip


def test_the_hold_out_is_what_ended_in_the_last_share_of_the_time() -> None:
    # 30 partitions ended at 0..19 s, then 10 at 100..109 s: the last 30 % of the time is the 10.
    end = np.concatenate((np.arange(30) * 20 / 30, 100 + np.arange(10))).astype(float)
    tuned_on, held_out = recording_of(40, end).split(0.3)
    assert held_out is not None
    assert (len(tuned_on), len(held_out)) == (30, 10)
    assert held_out.origin_s == pytest.approx(109 - 0.3 * 109)
    assert recording_of(40).split(0)[1] is None


def test_a_traces_ends_are_told_in_its_own_seconds_and_a_journals_as_dates() -> None:
    end = np.concatenate((np.arange(30) * 20 / 30, 100 + np.arange(10))).astype(float)
    trace = replace(recording_of(40, end), dated=False)
    assert trace.describe() == "40 partitions of 10 jobs, ended at 0.0 to 109.0 s"
    _, held_out = trace.split(0.3)
    assert held_out is not None
    assert held_out.describe().endswith("ended at 100.0 to 109.0 s")
    journal = recording_of(40, end + 1_796_635_683.0)
    dates = "ended 2026-12-07 09:28:03 to 09:29:52 UTC"
    assert journal.describe() == f"40 partitions of 10 jobs, {dates}"


def test_a_part_too_small_to_say_anything_is_refused() -> None:
    with pytest.raises(RecordingError, match=r"--holdout 0\.1: the part held out holds 2 "):
        recording_of(20).split(0.1)


def test_seed_zero_replays_the_recording_and_the_others_redraw_within_each_job() -> None:
    recording = recording_of(40)
    as_recorded = recording.replay(0)
    assert as_recorded.synthesis_s.tolist() == recording.synthesis_s.tolist()
    again = recording.replay(1)
    assert again.synthesis_s.tolist() == recording.replay(1).synthesis_s.tolist()
    assert again.synthesis_s.tolist() != as_recorded.synthesis_s.tolist()
    jobs = recording.job.tolist()
    for job in set(jobs):
        own = {s for s, j in zip(as_recorded.synthesis_s.tolist(), jobs, strict=True) if j == job}
        drawn = {s for s, j in zip(again.synthesis_s.tolist(), jobs, strict=True) if j == job}
        assert drawn <= own


class OneAtATime:
    """Dispatch one partition whenever nothing is in flight."""

    mode = Mode.PACING
    bootstraps = rebootstraps = 0
    synthesis_workers: int | None = None

    def observe_gpu_service(self, seconds: float) -> None:
        pass

    def observe_synthesis(self, seconds: float, parts: SynthesisParts | None = None) -> None:
        pass

    def observe_synthesis_failure(self, elapsed_s: float) -> None:
        pass

    def decide(self, obs: Observation) -> Decision:
        return Decision(1 if obs.inflight == 0 and obs.backlog else 0, None)

    def interval_s(self) -> float:
        return 0.0


def test_gpu_busy_counts_the_time_partitions_waited_for_dispatch_from_the_first_gpu_start() -> None:
    # Three partitions of 10 s synthesis and 1 s on the GPU, one at a time: the GPU proves at
    # 10-11 and 21-22 while the third waits (until 22), and idles 11-21: 2 s busy of 12.
    replay = Replay((0.0,), (3,), np.full(3, 10.0), np.full(3, 1.0))
    scenario = scenario_for(replay, HostShape(1, 8, 1, 100, 1))
    raw = Simulation(scenario, "one", lambda clock: OneAtATime(), replay).run()
    assert waiting_busy(raw) == pytest.approx(2 / 12)
    # Alone, a partition waits for nothing: its synthesis is no setting's doing.
    alone = Replay((0.0,), (1,), np.array([10.0]), np.array([1.0]))
    raw = Simulation(scenario_for(alone, HostShape(1, 8, 1, 100, 1)), "one",
                     lambda clock: OneAtATime(), alone).run()  # fmt: skip
    assert waiting_busy(raw) == 1.0


def test_the_default_grid_sweeps_the_near_balance_buffer_where_synthesis_barely_keeps_up() -> None:
    # 1.5 s syntheses on 32 slots finish 21 a second against the GPUs' 20: near balance; on
    # 128 slots, 85 a second, and the near-balance buffer never weighs in.
    recording = recording_of(40)
    assert near_balance(recording, H200)
    assert not near_balance(recording, replace(H200, cores=128))
    grid = default_grid(lead_s=2.0, near_balance=True)
    assert dict(grid.axes)["near_balance_idle"] == (0.0, 0.002, 0.01)
    assert len(grid.points()) == 3 * len(default_grid(lead_s=2.0).points())


def test_the_default_grid_sweeps_the_floor_history_where_synthesis_times_spread_widely() -> None:
    # Syntheses of 1 to 2 s: the 99th percentile within twice the mean. One in ten twenty
    # times as long (a heavy tail): far beyond, and the floor's history may matter (D216).
    narrow = recording_of(200)
    assert not wide_spread(narrow)
    heavy = replace(narrow, synthesis_s=np.where(np.arange(200) % 10 == 0, 30.0, 1.5))
    assert wide_spread(heavy)
    grid = default_grid(lead_s=2.0, wide=True)
    assert dict(grid.axes)["live_floor_longest"] == (0.0, 4.0)
    assert len(grid.points()) == 2 * len(default_grid(lead_s=2.0).points())
    assert "live_floor_longest" not in dict(default_grid(lead_s=2.0).axes)


def test_the_grid_names_settings_as_the_settings_do_and_checks_them() -> None:
    base = default_grid(lead_s=2.0)
    assert dict(base.axes)["target_ready_s"] == (0.0, 0.5, 1.0, 2.0)
    assert dict(base.axes)["target_ready"] == (4.0, 8.0)  # half the default floor, and it
    grid = parse_grid(["PACER_CONTROLLER__KP=0,1", "target_ready=2,4,8"], base, Settings())
    axes = dict(grid.axes)
    assert axes["kp"] == (0.0, 1.0)
    assert axes["target_ready"] == (2.0, 4.0, 8.0)
    assert len(grid.points()) == 2 * len(DEFAULT_KI) * 4 * 3


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gain=1", "--grid gain=1: gain is not a controller setting (PACER_CONTROLLER__*); "),
        ("kp=-1", "--grid kp=-1: kp: Input should be greater than or equal to 0"),
        ("kp=1,,2", "--grid kp=1,,2: a value is empty"),
        ("kp", "--grid kp: takes NAME=V1,V2,..."),
        (
            "interval_min_s=1",
            "--grid: the point kp=0 interval_max_s=0.5 interval_min_s=1 is "
            "refused: interval_min_s (1.0) must be less than interval_max_s (0.5)",
        ),
    ],
    ids=["unknown", "out-of-range", "empty", "no-values", "combination"],
)
def test_a_bad_grid_is_refused_naming_the_setting_and_the_rule(spec: str, message: str) -> None:
    base = Grid((("kp", (0.0,)), ("interval_max_s", (0.5,))))
    with pytest.raises(GridError) as caught:
        parse_grid([spec], base, Settings())
    assert str(caught.value).startswith(message)


def point(busy: float, memory_gib: float, **values: float) -> Point:
    outcome = Outcome(busy, busy, memory_gib * GIB, round(2 * memory_gib * GIB), True)
    return Point(dict(values), outcome)


POINTS = [point(0.95, 10, kp=0), point(0.99, 20, kp=1), point(0.98, 25, kp=2),
          point(0.999, 40, kp=3), point(0.9993, 60, kp=4)]  # fmt: skip


def test_the_frontier_keeps_what_nothing_beats_on_both_counts() -> None:
    assert [p.values["kp"] for p in frontier(POINTS)] == [0, 1, 3, 4]


@pytest.mark.parametrize(
    ("goal", "kp"),
    [
        (Goal("min-memory", 0.99), 1),
        (Goal("min-memory", 0.995), 3),
        (Goal("max-busy", 30 * GIB), 1),
        (Goal("max-busy", 100 * GIB), 3),
    ],
    ids=["min-memory", "min-memory-higher", "max-busy", "max-busy-tie-takes-less-memory"],
)
def test_a_goal_picks_its_point(goal: Goal, kp: int) -> None:
    assert goal.choose(POINTS).values["kp"] == kp


@pytest.mark.parametrize(
    ("goal", "message"),
    [(Goal("min-memory", 0.9999), "--min-busy 0.9999: no point of the grid keeps the GPUs busy"),
     (Goal("max-busy", 5 * GIB), "--max-memory 5.0 GiB: no point of the grid holds mean memory")],
    ids=["min-memory", "max-busy"],
)  # fmt: skip
def test_a_goal_no_point_meets_names_the_flag_and_the_nearest(goal: Goal, message: str) -> None:
    with pytest.raises(GoalError, match=message):
        goal.choose(POINTS)


def test_replays_are_deterministic() -> None:
    recording = recording_of(40)
    a, b = (evaluate(recording, H200, Settings(), 2) for _ in range(2))
    assert a == b


def heavy_tailed(tmp_path: Path) -> Recording:
    """bench.tune_trace's recording: one synthesis in ten a straggler, 4 to 10 times as long."""
    path = tmp_path / "trace.csv"
    path.write_text(trace(600, 4))
    assert HOST.startswith("--workers 2 --cores 32 --threads-per-synthesis 1 --partition-bytes")
    return read_trace(path)


def test_tuned_settings_beat_the_defaults_where_stragglers_drain_the_ready_queue(
    tmp_path: Path,
) -> None:
    # The default setpoint (8 partitions, 0.6 s of GPU work) is thin for stragglers that take
    # a synthesis lead time or more: a buffer of a lead time keeps the GPUs busy, on the part
    # tuned on and on the part held out, for more memory.
    tuned_on, held_out = heavy_tailed(tmp_path).split(0.3)
    assert held_out is not None
    lead = round(tuned_on.mean_synthesis_s, 2)
    grid = Grid((("target_ready_s", (0.0, lead)),))
    goal = Goal("min-memory", 0.99)
    tuning = tune(tuned_on, held_out, H200, Settings(), grid, goal, seeds=3)
    assert tuning.current.values == {"target_ready_s": 0.0}
    assert tuning.tuned.values == {"target_ready_s": lead}
    for check in tuning.checks:
        assert not goal.meets(check.current.outcome), check
        assert goal.meets(check.tuned.outcome), check
        assert goal.better(check.tuned.outcome, check.current.outcome)
        assert check.tuned.outcome.memory_bytes > check.current.outcome.memory_bytes
    assert [c.part for c in tuning.checks] == ["tuned on", "held out"]
    assert [c.partitions for c in tuning.checks] == [len(tuned_on), len(held_out)]


def test_a_larger_buffer_holds_more_and_idles_less_on_a_heavy_tail(tmp_path: Path) -> None:
    recording, _ = heavy_tailed(tmp_path).split(0.3)
    lead = recording.mean_synthesis_s
    # The buffer alone: the one raised near balance (32 cores for GPUs at 12.5 a second) off.
    buffers = (0.0, lead, 2 * lead)
    settings = [ControllerSettings(target_ready_s=s, near_balance_idle=0.0) for s in buffers]
    outcomes = [evaluate(recording, H200, Settings(controller=c), 2) for c in settings]
    assert all(b.memory_bytes > a.memory_bytes for a, b in itertools.pairwise(outcomes))
    assert outcomes[-1].busy > outcomes[0].busy + 0.01


def test_the_plot_marks_current_and_tuned_and_the_goal_from_no_idle_up() -> None:
    import matplotlib.pyplot as plt

    from pacer.sim.tune_plot import draw_frontier

    fig = draw_frontier(POINTS, POINTS[0], POINTS[1], Goal("min-memory", 0.99), "t")
    try:
        ax = fig.axes[0]
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert labels == ["the grid's points (5)", "the frontier", "current: kp=0",
                          "tuned: kp=1", "goal: GPU busy >= 0.99"]  # fmt: skip
        assert ax.get_ylim()[0] == 0
        assert ax.get_xlabel() == "mean memory in flight (GiB)"
    finally:
        plt.close(fig)
