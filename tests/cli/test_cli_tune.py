"""`pacer tune` as an operator runs it: on a journal file written by the journal's own API and
on a CSV trace; its output read back as an environment file; the held-out report; bad input
refused with the field and the rule, exit 2; the frontier's plot."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

import pytest

from bench import journal_trace
from bench.tune_trace import trace
from pacer.__main__ import main
from pacer.config import load_settings
from pacer.journal.records import PartitionResult
from pacer.journal.sqlite import SqliteJournal
from pacer.sim.plot import PLOT_EXTRA
from tests import env_file

START = datetime.fromisoformat("2026-12-01T10:00:00+00:00").timestamp()
HOST = ["--workers", "2", "--cores", "32", "--threads-per-synthesis", "1",
        "--partition-bytes", "3GiB", "--budget", "300GiB"]  # fmt: skip
# Near balance (32 slots at the recording's 1.4 s and more, the GPUs' 12.5 a second) the
# default grid sweeps near_balance_idle too: held at its default here.
SMALL_GRID = ["--grid", "kp=4", "--grid", "ki=0.1", "--grid", "target_ready_s=0,2.5",
              "--grid", "near_balance_idle=0.002", "--grid", "target_ready=8",
              "--grid", "live_floor_longest=0"]  # fmt: skip


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(trace(600, 4))
    return path


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    """The trace's 600 partitions in a journal: jobs of 20 accepted at 10:00, ten committed
    every second from 10:00:02 (a minute in all)."""
    path = tmp_path / "journal.sqlite"
    rows = [line.split(",") for line in trace(600, 4).splitlines()[1:]]
    now = [START]
    with SqliteJournal(path, clock=lambda: now[0]) as store:
        jobs = [store.add_job(20, "ntt", {}) for _ in range(len(rows) // 20)]
        results = [
            PartitionResult(jobs[int(job)].id, i % 20, f"d{i}", float(synthesis), float(gpu))
            for i, (synthesis, gpu, job) in enumerate(rows)
        ]
        for batch in range(len(results) // 10):
            now[0] = START + 2 + batch
            store.complete_partitions(results[10 * batch : 10 * batch + 10])
    return path


def settings_read_back(text: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The variables ``text`` sets as an EnvironmentFile, checked by loading them as
    settings."""
    variables = env_file.parse(text)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    load_settings()
    return variables


def test_tune_on_a_journal_prints_an_environment_file_of_the_tuned_settings(
    journal: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["tune", "--journal", str(journal), *HOST, "--goal", "min-memory",
            "--min-busy", "0.99", *SMALL_GRID]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert settings_read_back(out, monkeypatch) == {
        "PACER_CONTROLLER__KP": "4",
        "PACER_CONTROLLER__KI": "0.1",
        "PACER_CONTROLLER__TARGET_READY_S": "2.5",
        "PACER_CONTROLLER__NEAR_BALANCE_IDLE": "0.002",
        "PACER_CONTROLLER__TARGET_READY": "8",
        "PACER_CONTROLLER__LIVE_FLOOR_LONGEST": "0",
    }
    assert all(line.startswith(("#", "PACER_CONTROLLER__")) for line in out.splitlines() if line)
    assert f"# recording: journal {journal}, 600 partitions of 30 jobs, ended " in out
    assert "2026-12-01 10:00:02 to 10:01:01 UTC" in out
    assert "# host: GPU workers 2, cores 32, threads a synthesis 1, budget 300.0 GiB" in out
    assert "pacer tune: 2/2 settings replayed" in captured.err


def test_the_report_checks_tuned_against_current_on_the_part_held_out(
    trace_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tune", "--trace", str(trace_file), *HOST, "--goal", "min-memory",
            "--min-busy", "0.99", "--holdout", "0.3", *SMALL_GRID]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "# tuned on 420 partitions of 21 jobs; held out 180 partitions of 9 jobs" in out
    checked = ("#   current", "#   tuned")
    rows = [line.split() for line in out.splitlines() if line.startswith(checked)]
    # settings, part (two words), partitions, busy, memory, peak, meets goal
    assert [(r[1], r[2], r[3], r[4], r[-1]) for r in rows] == [
        ("current", "tuned", "on", "420", "no"), ("tuned", "tuned", "on", "420", "yes"),
        ("current", "held", "out", "180", "no"), ("tuned", "held", "out", "180", "yes"),
    ]  # fmt: skip
    assert "# tuned on: the tuned settings do better than the current ones" in out
    assert "# held out: the tuned settings do better than the current ones" in out


def test_the_host_comes_from_the_settings_where_no_flag_names_it(
    trace_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in (("WORKLOAD", "noop"), ("GPU__WORKERS", "3"), ("SYNTHESIS__CORES", "16"),
                        ("MEMORY__BUDGET_BYTES", "1GiB")):  # fmt: skip
        monkeypatch.setenv(f"PACER_{name}", value)
    argv = ["tune", "--trace", str(trace_file), "--goal", "max-busy", "--max-memory", "1GiB",
            "--holdout", "0", "--seeds", "1", "--grid", "ki=0.2", "--grid", "kp=0",
            "--grid", "target_ready_s=0"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    # noop: a synthesis on one thread, 64 bytes a partition.
    assert ("# host: GPU workers 3, cores 16, threads a synthesis 1, budget 1.0 GiB, "
            "partition 64 B") in out  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--goal", "min-memory", "--min-busy", "0.9"],
         "tune needs one recording: --journal PATH or --trace FILE.csv"),
        (["--trace", "t.csv", "--since", "2026-12-01T10:00", "--goal", "min-memory",
          "--min-busy", "0.9"], "--since chooses a window of a journal: it goes with --journal"),
        (["--trace", "t.csv", "--goal", "min-memory"],
         "--goal min-memory takes --min-busy SHARE (and not --max-memory)"),
        (["--trace", "t.csv", "--goal", "max-busy", "--min-busy", "0.9"],
         "--goal max-busy takes --max-memory SIZE (and not --min-busy)"),
    ],
    ids=["no-recording", "window-of-a-trace", "no-bound", "wrong-bound"],
)  # fmt: skip
def test_arguments_that_cannot_go_together_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tune", *argv]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", f"pacer: {message}\n")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--holdout", "0.95"], "argument --holdout: must be a number from 0 to 0.9, got '0.95'"),
        (["--min-busy", "0"], "argument --min-busy: must be a number more than 0 and at most 1"),
        (["--max-memory", "lots"], "argument --max-memory: must be a size in bytes more than 0"),
        (["--last", "2 hours"], "argument --last: must be a span of time more than 0 (90s, "),
        (["--since", "yesterday"], "argument --since: must be a time as ISO 8601"),
    ],
    ids=["holdout", "min-busy", "max-memory", "last", "since"],
)
def test_values_out_of_their_range_are_refused_as_they_are_parsed(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["tune", "--journal", "j.sqlite", "--goal", "min-memory", *argv])
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


def test_an_unknown_column_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("synthesis_s,gpu_s,queue_s\n1,0.1,3\n")
    assert main(["tune", "--trace", str(path), *HOST, "--goal", "min-memory",
                 "--min-busy", "0.9"]) == 2  # fmt: skip
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"pacer: trace {path}: unknown column 'queue_s'; the columns are "
                            "synthesis_s, gpu_s, synthesis_wait_s, arrival_s, job, bytes, "
                            "end_s, verify_s\n")  # fmt: skip


def test_an_empty_window_is_refused_with_what_the_journal_holds(
    journal: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    window = ["--last", "1h", "--until", "2026-12-01T09:00:00+00:00"]
    argv = ["tune", "--journal", str(journal), *window, *HOST, "--goal", "min-memory",
            "--min-busy", "0.9"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        "no partition completed in the window (--since, --until, --last) from "
        "2026-12-01 08:00:00 UTC until 2026-12-01 09:00:00 UTC; it holds 600 completed "
        "partitions, committed 2026-12-01 10:00:02 UTC to 2026-12-01 10:01:01 UTC"
    ) in err


def test_a_goal_no_point_meets_is_refused_with_the_frontier(
    trace_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tune", "--trace", str(trace_file), *HOST, "--goal", "max-busy", "--max-memory",
            "10GiB", "--seeds", "1", *SMALL_GRID]  # fmt: skip
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "The frontier on the part tuned on" in captured.err
    assert ("pacer: --max-memory 10.0 GiB: no point of the grid holds mean memory in flight "
            "<= 10.0 GiB (the least, kp=4 ki=0.1 target_ready_s=0 target_ready=8 "
            "near_balance_idle=0.002 live_floor_longest=0, "
            ) in captured.err  # fmt: skip


def test_a_partition_larger_than_the_budget_is_refused_naming_both(
    trace_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tune", "--trace", str(trace_file), *HOST, "--budget", "1GiB", "--goal",
            "min-memory", "--min-busy", "0.9"]  # fmt: skip
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "pacer: the host: partition_bytes (3221225472) must not exceed budget_bytes (1073741824) "
        "(--cores, --threads-per-synthesis, --budget, --partition-bytes, or their PACER_* "
        "settings)\n"
    )


def test_a_grid_naming_no_setting_is_refused(
    trace_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tune", "--trace", str(trace_file), *HOST, "--goal", "min-memory", "--min-busy",
            "0.9", "--grid", "gain=1"]  # fmt: skip
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith(
        "pacer: --grid gain=1: gain is not a controller setting (PACER_CONTROLLER__*); they are "
        "policy, target_ready, target_ready_s, kp, ki, "
    )


@pytest.mark.slow
def test_points_replayed_in_parallel_come_to_the_same(
    trace_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tune", "--trace", str(trace_file), *HOST, "--goal", "min-memory", "--min-busy",
            "0.99", "--seeds", "1", *SMALL_GRID]  # fmt: skip
    assert main(argv) == 0
    serial = capsys.readouterr().out
    assert main([*argv, "--parallel", "2"]) == 0
    assert capsys.readouterr().out == serial


def test_the_plot_of_the_frontier_is_written(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "frontier.png"
    argv = ["tune", "--trace", str(trace_file), *HOST, "--goal", "min-memory", "--min-busy",
            "0.99", "--seeds", "1", *SMALL_GRID, "--plot", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot written to {out}" in capsys.readouterr().err


def test_a_plot_without_matplotlib_names_the_extra_before_anything_runs(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    argv = ["tune", "--trace", str(trace_file), *HOST, "--goal", "min-memory", "--min-busy",
            "0.99", "--plot", str(tmp_path / "f.png")]  # fmt: skip
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"pacer: {PLOT_EXTRA}\n"


def test_help_explains_the_recording_the_goal_and_the_grid(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["tune", "--help"])
    assert caught.value.code == 0
    out = capsys.readouterr().out
    for text in ("synthesis_s, gpu_s", "--goal {min-memory,max-busy}", "--holdout SHARE",
                 "target_ready_s   0 and 1/4", "target_ready     4 and 8", "an\nenvironment file",
                 "verify_s             the seconds its proof took", "--verify-threads N",
                 "exit status"):  # fmt: skip
        assert text in out, text


def test_a_journal_written_out_as_a_trace_tunes_as_the_journal(
    journal: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bench.journal_trace` keeps every number in full: the trace replays as the journal."""
    written = tmp_path / "journal.csv"
    assert journal_trace.main([str(journal), "--out", str(written)]) == 0
    argv = [*HOST, "--goal", "min-memory", "--min-busy", "0.99", *SMALL_GRID]
    reports = []
    for recording in (["--journal", str(journal)], ["--trace", str(written)]):
        assert main(["tune", *recording, *argv]) == 0
        out = capsys.readouterr().out
        reports.append([line for line in out.splitlines()
                        if not line.startswith(("# recording:", "# tuned on "))])  # fmt: skip
    assert reports[0] == reports[1]
    assert any(line.startswith("PACER_CONTROLLER__") for line in reports[0])


def tuned_at_least_0_9_busy(
    capsys: pytest.CaptureFixture[str], trace_path: Path, flags: list[str]
) -> str:
    """What `pacer tune` prints for the trace at ``trace_path`` on HOST with ``flags``."""
    argv = ["tune", "--trace", str(trace_path), *HOST, *flags, "--goal", "min-memory",
            "--min-busy", "0.9", *SMALL_GRID]  # fmt: skip
    assert main(argv) == 0
    return capsys.readouterr().out


def with_checks(text: str, every: int, seconds: float) -> str:
    """A trace's text with a ``verify_s`` column: every ``every``-th partition checked for
    ``seconds``."""
    lines = text.splitlines()
    rows = [f"{line},{seconds if i % every == 0 else 0}" for i, line in enumerate(lines[1:])]
    return "\n".join([f"{lines[0]},verify_s", *rows]) + "\n"


@pytest.mark.parametrize(
    ("flags", "workload", "told"),
    [
        (["--verify-threads", "2"], None, ", verify threads 2"),
        (["--verify-threads", "0"], None, ", checks on the synthesis workers"),
        ([], "noop", ", checks on the synthesis workers"),  # synthesis in threads: the plan's
    ],
    ids=["two-threads", "on-the-workers", "from-the-workload"],
)
def test_a_recording_with_checks_replays_them_on_the_hosts_verify_threads(
    tmp_path: Path, flags: list[str], workload: str | None, told: str,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    if workload is not None:
        monkeypatch.setenv("PACER_WORKLOAD", workload)
    path = tmp_path / "t.csv"
    path.write_text(with_checks(trace(600, 4), 10, 0.5))
    out = tuned_at_least_0_9_busy(capsys, path, flags)
    assert "; 60 checked on the CPU (mean 0.5 s)" in out
    assert f"partition 3.0 GiB{told}\n" in out


def test_a_recording_without_checks_leaves_verify_threads_out_of_the_host(
    trace_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tuned_at_least_0_9_busy(capsys, trace_file, ["--verify-threads", "2"])
    assert "partition 3.0 GiB\n" in out
    assert "checked" not in out
