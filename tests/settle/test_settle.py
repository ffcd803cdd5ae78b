"""``pacer settle``: the detector on replayed and random series, the CLI, the state file, and
real processes (a named child alive and as a zombie; a child holding 2 GiB, then killed; a
child mapping an unlinked pool block of a dead pacer); memory held by such children, on a
/proc tree laid out by the test."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu.shm.blocks import BLOCK_PREFIX, SHM_DIR
from pacer.settle import cli as settle_cli
from pacer.settle.detector import GIB, SettleDetector, parse_size
from pacer.settle.held import BlockHolder, Held, HeldBlockScanner, ReportedHolders, kill_holder
from pacer.settle.loop import Result, SettleOptions
from pacer.settle.loop import run as settle_run
from pacer.settle.report import summary as settle_summary
from pacer.settle.sources import MeminfoSampler, ProcessScanner, Sample
from pacer.settle.state import default_state_file, record_state
from tests.conftest import FakeClock
from tests.kept_pools import Holder, records, shm_exists
from tests.pool_holder import kill_holder as kill_pool_holder
from tests.pool_holder import start_pool_holder

MIB = 2**20


def cli(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of ``pacer settle ARGV``."""
    parser = argparse.ArgumentParser(prog="pacer settle")
    settle_cli.add_arguments(parser)
    status = settle_cli.main(parser.parse_args(argv))
    out, err = capsys.readouterr()
    return status, out, err


def write_series(path: Path, gib_at: Sequence[tuple[float, float]]) -> Path:
    """A replay CSV with an extra column, used memory given in GiB."""
    rows = ["t_s,used_bytes,note"] + [f"{t},{round(g * GIB)},x" for t, g in gib_at]
    path.write_text("\n".join(rows) + "\n")
    return path


def falling_then_flat() -> list[tuple[float, float]]:
    """300 GiB falling 5 GiB/s to 250 GiB at t=10, then flat with ±0.3 GiB wobble to t=60."""
    wobble = [0.3, -0.2, 0.1, -0.3, 0.0, 0.2]
    return [(t, 300 - 5 * t if t <= 10 else 250 + wobble[t % 6]) for t in range(61)]


# --- replayed series ------------------------------------------------------------------------


def test_falling_series_that_flattens_settles_stable_a_full_window_later(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = write_series(tmp_path / "drain.csv", falling_then_flat())
    status, out, _ = cli(["--replay", str(csv), "--json"], capsys)
    report = json.loads(out)
    assert status == 0
    # At t=39 the window still holds t=9 (255 GiB); from t=40 it holds only the flat part.
    assert (report["reason"], report["settled_at_s"]) == ("stable", 40.0)
    assert report["samples"][-1]["t_s"] == 40.0


def test_stable_summary_names_the_change_and_the_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = write_series(tmp_path / "drain.csv", falling_then_flat())
    status, out, _ = cli(["--replay", str(csv), "--baseline", "230GiB"], capsys)
    assert status == 0
    assert out == (
        "settled after 40.0 s: used 250.0 GiB, stable: changed 0.6 GiB over the last 30 s "
        "(20.0 GiB above the 230.0 GiB baseline)\n"
    )


def test_series_reaching_the_baseline_settles_at_the_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = write_series(tmp_path / "drain.csv", [(t, 300 - 10 * t) for t in range(10)])
    status, out, _ = cli(["--replay", str(csv), "--baseline", "230GiB"], capsys)
    assert status == 0
    # 232 GiB is not yet reached at t=6 (240 GiB); at t=7 used is 230 GiB.
    assert out == "settled after 7.0 s: used 230.0 GiB, within 2.0 GiB of the 230.0 GiB baseline\n"


def test_falling_just_faster_than_the_tolerance_per_window_never_settles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rate_gib_s = 2.1 / 30  # 2.1 GiB per 30 s window, the tolerance is 2 GiB
    csv = write_series(tmp_path / "drain.csv", [(t, 400 - rate_gib_s * t) for t in range(601)])
    argv = ["--replay", str(csv), "--baseline", "230GiB", "--timeout", "600"]
    status, out, _ = cli(argv, capsys)
    assert status == 1
    assert out.startswith("not settled after 600 s: used memory still falling 2.1 GiB over the")
    status, out, _ = cli([*argv, "--json"], capsys)
    report = json.loads(out)
    assert (status, report["settled"], report["reason"]) == (1, False, "timeout")
    assert report["settled_at_s"] is None


def test_noise_within_the_tolerance_is_stable_after_one_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    noise = [0.9, -0.9, 0.5, 0.0, -0.4, 0.8, -0.7]
    csv = write_series(tmp_path / "noisy.csv", [(t, 240 + noise[t % 7]) for t in range(100)])
    status, out, _ = cli(["--replay", str(csv), "--json"], capsys)
    report = json.loads(out)
    assert (status, report["reason"], report["settled_at_s"]) == (0, "stable", 30.0)


def test_replay_times_count_from_the_first_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = write_series(tmp_path / "epoch.csv", [(1.7e9 + t, 240) for t in range(0, 40, 5)])
    status, out, _ = cli(["--replay", str(csv), "--json"], capsys)
    assert (status, json.loads(out)["settled_at_s"]) == (0, 30.0)


def test_replay_that_ends_before_settling_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = write_series(tmp_path / "short.csv", [(t, 240) for t in range(10)])
    status, out, _ = cli(["--replay", str(csv), "--baseline", "200GiB"], capsys)
    assert status == 1
    assert out.startswith(
        "not settled after 9 s (end of the replay): used memory flat over the last 9 s"
    )
    assert "short of the 30 s window" in out


def test_json_prints_one_object_of_the_documented_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = write_series(tmp_path / "drain.csv", [(t * 0.5, 300 - t) for t in range(40)])
    status, out, err = cli(["--replay", str(csv), "--baseline", "270GiB", "--json"], capsys)
    assert (status, err) == (0, "")
    report = json.loads(out)
    assert out.count("\n") == 1
    assert set(report) == {"settled", "settled_at_s", "reason", "samples"}
    assert (report["settled"], report["reason"], report["settled_at_s"]) == (True, "baseline", 14.0)
    assert report["samples"][:2] == [
        {"t_s": 0.0, "used_bytes": 300 * GIB},
        {"t_s": 0.5, "used_bytes": 299 * GIB},
    ]
    assert len(report["samples"]) == 29


def test_verbose_prints_progress_every_10_s_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = write_series(tmp_path / "drain.csv", falling_then_flat())
    status, _, err = cli(["--replay", str(csv), "--verbose"], capsys)
    lines = err.splitlines()
    assert status == 0
    assert [line.split(" s:")[0] for line in lines] == [
        f"pacer settle: {t}" for t in (0, 10, 20, 30)
    ]
    assert lines[1] == "pacer settle: 10 s: used 250.0 GiB, falling 50.0 GiB over the last 10 s"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "line 1: the header must name columns t_s and used_bytes; missing t_s, used_bytes"),
        ("time,used\n0,1\n", "line 1: the header must name columns t_s and used_bytes"),
        ("t_s,used_bytes\n", "line 1: no samples after the header"),
        ("t_s,used_bytes\n0,1\nsoon,2\n", "line 3: t_s 'soon' is not a number of seconds"),
        ("t_s,used_bytes\n0,1\nnan,2\n", "line 3: t_s 'nan' is not a finite number"),
        ("t_s,used_bytes\n0,1\n1,-2\n", "line 3: used_bytes '-2' is not a whole number of bytes"),
        ("t_s,used_bytes\n0,1\n1,2.5\n", "line 3: used_bytes '2.5' is not a whole number"),
        ("t_s,used_bytes\n0,1\n1,2\n1,3\n", "line 4: t_s must increase from one row to the next"),
        ("t_s,used_bytes\n0,1\n1\n", "line 3: 1 fields, the header has 2"),
    ],
    ids=[
        "empty",
        "no-header",
        "no-rows",
        "word-time",
        "nan-time",
        "negative-bytes",
        "fractional-bytes",
        "repeated-time",
        "short-row",
    ],
)
def test_bad_replay_file_exits_2_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, problem: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    status, out, err = cli(["--replay", str(path)], capsys)
    assert (status, out) == (2, "")
    assert err.startswith(f"pacer settle: {path} {problem}")


def test_missing_replay_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = cli(["--replay", str(tmp_path / "nope.csv")], capsys)
    assert status == 2
    assert "cannot read" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--baseline", "23OGiB"], "--baseline: '23OGiB' is not a size: give bytes or a number"),
        (["--tolerance", "2XB"], "--tolerance: '2XB' is not a size"),
        (["--tolerance=-1GiB"], "--tolerance: '-1GiB' is not a size"),
        (["--tolerance", "0"], "--tolerance: must be more than 0 bytes, got '0'"),
        (["--window", "0"], "--window: '0' is not a number of seconds > 0"),
        (["--interval", "fast"], "--interval: 'fast' is not a number of seconds > 0"),
        (["--timeout", "-1"], "--timeout: '-1' is not a number of seconds >= 0"),
        (["--timeout", "inf"], "--timeout: 'inf' is not a number of seconds >= 0"),
    ],
    ids=[
        "baseline-typo",
        "unknown-unit",
        "negative-size",
        "zero-tolerance",
        "zero-window",
        "word-interval",
        "negative-timeout",
        "infinite-timeout",
    ],
)
def test_bad_option_exits_2_naming_the_option_and_the_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    csv = write_series(tmp_path / "ok.csv", [(0, 1)])
    status, out, err = cli([*argv, "--replay", str(csv)], capsys)
    assert (status, out) == (2, "")
    assert err.startswith(f"pacer settle: {message}")


def test_help_documents_defaults_and_examples() -> None:
    parser = argparse.ArgumentParser(prog="pacer settle")
    settle_cli.add_arguments(parser)
    text = " ".join(parser.format_help().split())
    for fragment in [
        "(default: 2GiB)",
        "(default: 30)",
        "(default: 1)",
        "(default: 900",
        "examples:",
        "--scope {auto,host,cgroup}",
        "cgroup where no memory.max limits this process is an error (default: auto)",
        "the cgroup's memory.current with no pacer running",
        "of the same scope",
        "pacer settle --scope host",
    ]:
        assert fragment in text
    assert "ExecStartPre=/usr/bin/pacer settle --timeout 900" in parser.format_help()


# --- the detector ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096", 4096),
        ("0", 0),
        ("2GiB", 2 * GIB),
        ("512MiB", 512 * MIB),
        ("230GiB", 230 * GIB),
        ("1.5TiB", 3 * 2**39),
        ("2 GiB", 2 * GIB),
        (" 2gib ", 2 * GIB),
        ("2G", 2 * 10**9),
        ("2GB", 2 * 10**9),
        ("100k", 100_000),
    ],
    ids=[
        "bytes",
        "zero",
        "gib",
        "mib",
        "operators-baseline",
        "fractional-tib",
        "space",
        "case-and-blanks",
        "g-is-decimal",
        "gb-is-decimal",
        "k-is-decimal",
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "-2GiB", "2 XiB", "1e9", "two"])
def test_parse_size_rejects_with_the_rule(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a size: give bytes or a number with a unit"):
        parse_size(text)


def test_detector_rejects_bad_settings_and_out_of_order_samples() -> None:
    with pytest.raises(ValueError, match="tolerance_bytes must be > 0, got 0"):
        SettleDetector(None, 0, 1.0)
    with pytest.raises(ValueError, match="window_s must be > 0, got 0"):
        SettleDetector(None, 1, 0.0)
    detector = SettleDetector(None, 1, 1.0)
    detector.add(1.0, 5)
    with pytest.raises(ValueError, match="samples must come in time order"):
        detector.add(1.0, 5)


series_steps = st.lists(
    st.tuples(st.floats(0.01, 5.0), st.integers(0, 2_000)), min_size=1, max_size=80
)


@given(
    steps=series_steps,
    tolerance=st.integers(1, 1_000),
    window_s=st.floats(0.5, 20.0),
    baseline=st.one_of(st.none(), st.integers(0, 2_000)),
)
def test_settled_only_on_a_full_quiet_window_or_at_the_baseline(
    steps: list[tuple[float, int]], tolerance: int, window_s: float, baseline: int | None
) -> None:
    detector = SettleDetector(baseline, tolerance, window_s)
    seen: list[tuple[float, int]] = []
    t = 0.0
    for dt, used in steps:
        t += dt
        seen.append((t, used))
        verdict = detector.add(t, used)
        if verdict is None:
            continue
        assert (verdict.t_s, verdict.used_bytes) == (t, used)
        if verdict.reason == "baseline":
            assert baseline is not None
            assert used <= baseline + tolerance
        else:
            assert any(ts <= t - window_s for ts, _ in seen), "window not covered"
            in_window = [u for ts, u in seen if t - window_s <= ts <= t]
            assert max(in_window) - min(in_window) < tolerance


class ListSampler:
    """Hands out the given samples in turn, then repeats the last."""

    def __init__(self, samples: Sequence[Sample]) -> None:
        self.samples = list(samples)

    def sample(self) -> Sample:
        return self.samples.pop(0) if len(self.samples) > 1 else self.samples[0]


def fake_run(
    options: SettleOptions, samples: Sequence[Sample], clock: FakeClock
) -> tuple[Result, list[float]]:
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.advance(seconds)

    return settle_run(options, clock, sleep, ListSampler(samples)), sleeps


def test_run_samples_on_the_interval_and_once_more_at_the_timeout(clock: FakeClock) -> None:
    options = SettleOptions(interval_s=1.0, timeout_s=2.5)
    result, sleeps = fake_run(options, [Sample(100 * GIB - k * GIB) for k in range(10)], clock)
    assert [s.t_s for s in result.samples] == [0.0, 1.0, 2.0, 2.5]
    assert sleeps == [1.0, 1.0, 0.5]
    assert (result.settled, result.reason) == (False, "timeout")


def test_timeout_zero_checks_once_without_sleeping(clock: FakeClock) -> None:
    options = SettleOptions(timeout_s=0, baseline_bytes=100 * GIB)
    result, sleeps = fake_run(options, [Sample(101 * GIB)], clock)
    assert (result.settled, result.reason, result.settled_at_s, sleeps) == (
        True,
        "baseline",
        0.0,
        [],
    )
    result, sleeps = fake_run(options, [Sample(103 * GIB)], clock)
    assert (result.settled, len(result.samples), sleeps) == (False, 1, [])


def test_gpu_memory_must_settle_too(clock: FakeClock) -> None:
    options = SettleOptions(window_s=5.0, timeout_s=60.0, baseline_bytes=100 * GIB)
    draining_gpu = [Sample(100 * GIB, max(0, 40 - 4 * k) * GIB) for k in range(20)]
    result, _ = fake_run(options, draining_gpu, clock)
    # Host is at its baseline from the start; GPU memory reaches 0 at t=10, flat from then.
    assert (result.settled, result.reason, result.settled_at_s) == (True, "baseline", 15.0)
    assert result.samples[-1].as_dict() == {
        "t_s": 15.0,
        "used_bytes": 100 * GIB,
        "gpu_used_bytes": 0,
    }


def test_summary_blames_gpu_memory_when_only_it_has_not_settled(clock: FakeClock) -> None:
    options = SettleOptions(window_s=5.0, timeout_s=3.0, baseline_bytes=100 * GIB)
    draining_gpu = [Sample(100 * GIB, (40 - 4 * k) * GIB) for k in range(10)]
    result, _ = fake_run(options, draining_gpu, clock)
    assert (result.settled, result.host_settled, result.gpu_settled) == (False, True, False)
    assert settle_summary(result, options) == (
        "not settled after 3 s: GPU memory falling 12.0 GiB over the last 3 s, "
        "short of the 5 s window"
    )


def test_memory_kept_for_the_next_pacer_is_neither_draining_nor_free(
    clock: FakeClock, tmp_path: Path
) -> None:
    options = SettleOptions(window_s=5.0, timeout_s=3.0, baseline_bytes=46 * GIB)
    kept = [Sample(110 * GIB, kept_bytes=63 * GIB)] * 5
    result, _ = fake_run(options, kept, clock)
    assert (result.settled, result.reason, result.settled_at_s) == (True, "baseline", 0.0)
    assert settle_summary(result, options) == (
        "settled after 0.0 s: used 110.0 GiB, 63.0 GiB of it kept for the next pacer, "
        "within 2.0 GiB of the 46.0 GiB baseline"
    )
    assert result.samples[0].as_dict()["kept_bytes"] == 63 * GIB
    record_state(tmp_path / "settle.json", result)  # the host's rest, without the pool
    assert json.loads((tmp_path / "settle.json").read_text())["baseline_bytes"] == 47 * GIB
    # The same memory not kept on purpose is memory that has not come back.
    held, _ = fake_run(options, [Sample(110 * GIB)] * 5, clock)
    assert (held.settled, held.reason) == (False, "timeout")


def kept_pool(tmp_path: Path) -> tuple[Holder, list[str]]:
    """A pool of 2 slots kept by a process that has ended, and the options of a check once."""
    holder = Holder(slots=2)
    holder.close(keep=True)
    argv = ["--timeout", "0", "--process-name", "", "--state-file", str(tmp_path / "s.json"),
            "--no-record", "--scope", "host"]  # fmt: skip
    return holder, argv


@pytest.mark.usefixtures("only_own_blocks")
@pytest.mark.slow
def test_the_command_reports_a_kept_pool_leaves_it_and_drops_it_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shm_dir: str
) -> None:
    holder, argv = kept_pool(tmp_path)
    _, out, err = cli([*argv, "--json"], capsys)
    assert (
        f"kept for the next pacer: 2 blocks, 24.0 KiB in {shm_dir} (pacer {holder.pid} stopped, "
        "generation 1, 12.0 KiB slots of 1024+1024+1024 <u4)"
    ) in err
    assert json.loads(out)["samples"][0]["kept_bytes"] == 24 * 1024
    assert all(shm_exists(shm_dir, name) for name in holder.names)  # kept in place
    assert "not settled" not in err

    _, _, err = cli([*argv, "--drop-kept"], capsys)
    assert "asked to drop kept pools" in err
    assert not any(shm_exists(shm_dir, name) for name in holder.names)
    assert records(shm_dir) == {}


@pytest.mark.usefixtures("only_own_blocks")
@pytest.mark.slow
def test_a_record_whose_blocks_are_gone_is_removed_by_the_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shm_dir: str
) -> None:
    holder, argv = kept_pool(tmp_path)
    os.unlink(f"{shm_dir}/{holder.names[1]}")
    _, _, err = cli(argv, capsys)
    assert f"its block {holder.names[1]} is gone" in err
    assert "removed 1 pinned-pool blocks" in err  # the one left, no record keeping it now
    assert (records(shm_dir), shm_exists(shm_dir, holder.names[0])) == ({}, False)


@pytest.mark.usefixtures("only_own_blocks")
@pytest.mark.slow
def test_the_directory_swept_is_shm_dir_else_the_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shm_dir: str
) -> None:
    holder, argv = kept_pool(tmp_path)  # in shm_dir, which PACER_GPU__SHM_DIR names
    elsewhere = os.path.join(shm_dir, "elsewhere")
    os.mkdir(elsewhere)
    _, _, err = cli([*argv, "--drop-kept", "--shm-dir", elsewhere], capsys)
    assert "kept for the next pacer" not in err
    assert all(shm_exists(shm_dir, name) for name in holder.names)  # not looked at
    os.rmdir(elsewhere)
    _, _, err = cli([*argv, "--drop-kept"], capsys)
    assert "asked to drop kept pools" in err
    assert os.listdir(shm_dir) == []


@pytest.mark.parametrize(
    ("option", "setting", "named"),
    [("shm", None, "--shm-dir"), (None, "shm", "PACER_GPU__SHM_DIR")],
    ids=["option", "setting"],
)
def test_a_relative_shm_dir_is_refused_naming_where_it_came_from(
    option: str | None,
    setting: str | None,
    named: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if setting is not None:
        monkeypatch.setenv("PACER_GPU__SHM_DIR", setting)
    argv = ["--timeout", "0", *(["--shm-dir", option] if option is not None else [])]
    status, _, err = cli(argv, capsys)
    assert status == 2
    assert f"{named}: must be an absolute path, such as {SHM_DIR}, got 'shm'" in err


# --- state file -----------------------------------------------------------------------------


def test_settled_level_is_remembered_and_used_as_the_next_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = ["--state-file", str(tmp_path / "state" / "settle.json")]
    flat = write_series(tmp_path / "flat.csv", [(t, 240) for t in range(40)])
    assert cli(["--replay", str(flat), *state], capsys)[0] == 0
    assert json.loads((tmp_path / "state" / "settle.json").read_text())["baseline_bytes"] == (
        240 * GIB
    )
    falling = write_series(tmp_path / "falling.csv", [(t, 300 - 10 * t) for t in range(10)])
    status, out, _ = cli(["--replay", str(falling), *state], capsys)
    assert status == 0
    assert out == "settled after 6.0 s: used 240.0 GiB, within 2.0 GiB of the 240.0 GiB baseline\n"


def test_no_record_leaves_the_state_file_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "settle.json"
    flat = write_series(tmp_path / "flat.csv", [(t, 240) for t in range(40)])
    assert cli(["--replay", str(flat), "--state-file", str(state), "--no-record"], capsys)[0] == 0
    assert not state.exists()


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("{not json", "Expecting property name"),
        ("[1, 2]", "not a JSON object"),
        ('{"baseline_bytes": "lots"}', "baseline_bytes must be a whole number of bytes >= 0"),
        ('{"baseline_bytes": -1}', "baseline_bytes must be a whole number of bytes >= 0"),
    ],
    ids=["not-json", "not-an-object", "not-a-number", "negative"],
)
def test_corrupt_state_file_is_ignored_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, why: str
) -> None:
    state = tmp_path / "settle.json"
    state.write_text(content)
    flat = write_series(tmp_path / "flat.csv", [(t, 240) for t in range(40)])
    status, out, err = cli(["--replay", str(flat), "--state-file", str(state)], capsys)
    assert (status, out.split(":")[0]) == (0, "settled after 30.0 s")
    assert err.startswith(f"pacer settle: ignoring state file {state}: {why}")
    assert json.loads(state.read_text())["baseline_bytes"] == 240 * GIB


def test_default_state_file_follows_systemds_state_directory() -> None:
    assert default_state_file({}) == Path("/var/lib/pacer/settle.json")
    environ = {"STATE_DIRECTORY": "/var/lib/pacer-a:/var/lib/pacer-b"}
    assert default_state_file(environ) == Path("/var/lib/pacer-a/settle.json")


# --- real processes -------------------------------------------------------------------------


@pytest.mark.slow
def test_named_process_blocks_settling_while_alive_and_as_a_zombie(
    tmp_path: Path, clock: FakeClock
) -> None:
    # The kernel names a process after the file it executes, cut to 15 characters: running
    # the interpreter through a link called pacer-XXXXXXXX-test gives comm "pacer-XXXXXXXX-".
    # The name is this test's own, so that a copy of the suite beside it is not counted.
    name = f"pacer-{secrets.token_hex(4)}-test"
    comm = name[:15]
    exe = tmp_path / name
    exe.symlink_to(sys.executable)
    check_once = SettleOptions(timeout_s=0, baseline_bytes=100 * GIB)
    at_baseline = [Sample(100 * GIB)]
    scanner = ProcessScanner(name)
    code = "import sys; print('ready', flush=True); sys.stdin.read()"
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    # "serve" on its command line, as a pacer service has; a client of that name is not waited for.
    argv = [str(exe), "-c", code, "serve"]
    with subprocess.Popen(argv, **pipes) as child:  # type: ignore[call-overload]
        assert child.stdout.readline() == "ready\n"
        result = settle_run(check_once, clock, clock.advance, ListSampler(at_baseline), scanner)
        assert not result.settled
        assert [(p.pid, p.name) for p in result.blockers] == [(child.pid, comm)]

        child.kill()
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
        result = settle_run(check_once, clock, clock.advance, ListSampler(at_baseline), scanner)
        assert not result.settled
        assert [p.state for p in result.blockers] == ["Z"]
        assert settle_summary(result, check_once) == (
            f"not settled after 0 s: process {comm} (pid {child.pid}, zombie) still present"
        )

        child.wait()
        result = settle_run(check_once, clock, clock.advance, ListSampler(at_baseline), scanner)
        assert (result.settled, result.reason, result.blockers) == (True, "baseline", [])


def test_process_scanner_leaves_out_this_process_and_its_ancestors() -> None:
    own_name = Path("/proc/self/comm").read_text().strip()
    assert os.getpid() not in [p.pid for p in ProcessScanner(own_name)()]


@pytest.mark.usefixtures("only_own_blocks", "host_memory_to_itself")
@pytest.mark.slow
def test_settles_for_real_after_a_child_holding_2gib_is_killed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = (
        "import sys\nimport numpy as np\n"
        "held = np.ones(2**28)  # 2 GiB, every page written\n"
        "print('ready', flush=True)\nsys.stdin.read()\n"
    )
    before = MeminfoSampler().sample().used_bytes
    argv = [
        "--baseline", str(before), "--tolerance", "256MiB", "--window", "1", "--interval", "0.1",
        "--process-name", "", "--state-file", str(tmp_path / "settle.json"), "--no-record",
        "--json", "--scope", "host",
    ]  # fmt: skip
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    with subprocess.Popen([sys.executable, "-c", code], **pipes) as child:  # type: ignore[call-overload]
        assert child.stdout.readline() == "ready\n"
        status, out, _ = cli([*argv, "--timeout", "0"], capsys)
        held = json.loads(out)
        assert (status, held["settled"], held["reason"]) == (1, False, "timeout")
        assert held["samples"][0]["used_bytes"] - before > 1.5 * GIB

        child.kill()
        started = time.monotonic()
        status, out, _ = cli([*argv, "--timeout", "30"], capsys)
        report = json.loads(out)
        assert (status, report["settled"]) == (0, True)
        assert report["reason"] in ("baseline", "stable")
        assert time.monotonic() - started < 10


@pytest.mark.usefixtures("only_own_blocks")
@pytest.mark.slow
def test_blocks_a_killed_pacer_left_in_its_directory_are_removed_and_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shm_dir: str
) -> None:
    holder, names = start_pool_holder()
    kill_pool_holder(holder)
    assert all(shm_exists(shm_dir, name) for name in names)
    argv = ["--timeout", "0", "--process-name", "", "--state-file", str(tmp_path / "s.json"),
            "--no-record", "--scope", "host"]  # fmt: skip
    _, _, err = cli(argv, capsys)
    assert not any(shm_exists(shm_dir, name) for name in names)
    assert f"removed 2 pinned-pool blocks (0.00 GiB) that a dead pacer left in {shm_dir}" in err
    _, _, err = cli(argv, capsys)  # nothing left to remove, nothing said
    assert "pinned-pool blocks" not in err


# --- memory held by processes that outlived their pacer -----------------------------------


def fake_process(
    proc: Path,
    pid: int,
    name: str,
    cmdline: str,
    blocks: Sequence[tuple[str, int, int, bool]] = (),
    started: int = 1000,
    directory: str = SHM_DIR,
) -> None:
    """A /proc/PID directory: stat, cmdline, and maps and smaps holding a library mapping and
    one shared mapping per block in ``directory`` (name, inode, resident bytes, unlinked)."""
    where = proc / str(pid)
    where.mkdir(parents=True)
    fields = ["S", "1", *["0"] * 17, str(started), "0"]  # state, ppid, …, starttime (22nd)
    (where / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")
    (where / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")
    maps = ["5600000000-5600001000 r-xp 00000000 08:01 4242    /usr/bin/python3.11"]
    smaps = [maps[0], "Size:  4 kB", "Rss:  4 kB", "Pss:  4 kB"]
    for number, (block, inode, resident, unlinked) in enumerate(blocks):
        start = 0x7F0000000000 + number * 0x100000000
        path = f"{directory}/{block}"
        header = f"{start:x}-{start + 6 * GIB:x} rw-s 00000000 00:1b {inode:<10} {path}"
        header += " (deleted)" if unlinked else ""
        maps.append(header)
        smaps += [header, f"Size: {6 * GIB // 1024} kB", f"Rss: {resident // 1024} kB"]
    (where / "maps").write_text("\n".join(maps) + "\n")
    (where / "smaps").write_text("\n".join(smaps) + "\n")


FORKSERVER = "/usr/bin/python3 -B -c from multiprocessing.forkserver import main; main(9, 10)"


def host_with_orphans(proc: Path, directory: str = SHM_DIR) -> None:
    """A live pacer (100) with its worker (101); a dead one's (200) two workers and a process
    that mapped its blocks to look at them; a block whose owner's PID (400) went to another
    process; an unrelated process. Every block is in ``directory``."""
    live = [(f"{BLOCK_PREFIX}100-0", 11, 6 * GIB, False)]
    serve = "/usr/bin/python3 /usr/local/bin/pacer serve"
    fake_process(proc, 100, "pacer", serve, live, directory=directory)
    fake_process(proc, 101, "pacer-synth", FORKSERVER, live, directory=directory)
    dead = [
        (f"{BLOCK_PREFIX}200-0", 21, 6 * GIB, True),
        (f"{BLOCK_PREFIX}200-1", 22, 2 * GIB, True),
    ]
    fake_process(proc, 201, "pacer-synth", FORKSERVER, dead, started=2001, directory=directory)
    fake_process(proc, 202, "python", FORKSERVER, [(*dead[0][:2], 5 * GIB, True)],
                 directory=directory)  # fmt: skip
    fake_process(proc, 300, "python", "python3 look.py", [(*dead[1][:2], 1 * GIB, False)],
                 directory=directory)  # fmt: skip
    fake_process(proc, 400, "bash", "bash")  # not the pacer that made block 400-0
    fake_process(proc, 401, "pacer-synth", FORKSERVER, [(f"{BLOCK_PREFIX}400-0", 41, GIB, False)],
                 directory=directory)  # fmt: skip
    fake_process(proc, 500, "sshd", "sshd: /usr/sbin/sshd")
    (proc / "self").mkdir()  # not a process directory


def test_holders_of_a_dead_pacers_blocks_are_found_and_sized(tmp_path: Path) -> None:
    host_with_orphans(tmp_path)
    held = HeldBlockScanner(tmp_path)()
    assert [(h.pid, h.owners, h.blocks, h.unlinked, h.synthesis) for h in held.holders] == [
        (201, (200,), 2, 2, True),
        (202, (200,), 1, 1, False),  # a forkserver child without pacer's name: not pacer's
        (300, (200,), 1, 0, False),
        (401, (400,), 1, 0, True),
    ]
    assert [h.resident_bytes for h in held.holders] == [8 * GIB, 5 * GIB, GIB, GIB]
    assert held.held_bytes == (6 + 2 + 1) * GIB  # each block once, at the most resident
    assert held.words() == "held by orphans: 4 processes, 9.0 GiB"
    assert str(held.holders[0]) == (
        f"pacer synthesis process 201 ({FORKSERVER}) maps 2 pool blocks of dead pacer 200 "
        "(2 unlinked), 8.0 GiB resident"
    )
    assert held.holders[0].started == 2001
    assert HeldBlockScanner(tmp_path, prefix=f"{BLOCK_PREFIX}400-")().held_bytes == GIB
    with pytest.raises(ValueError, match="prefix must start with 'pacer-pool-'"):
        HeldBlockScanner(tmp_path, prefix="other-")


def test_memory_held_by_orphans_is_never_settled(tmp_path: Path, clock: FakeClock) -> None:
    host_with_orphans(tmp_path)
    options = SettleOptions(window_s=5.0, timeout_s=20.0, baseline_bytes=100 * GIB)
    scanner = HeldBlockScanner(tmp_path)
    progress: list[str] = []

    def run() -> Result:
        sampler = ListSampler([Sample(100 * GIB)])  # at the baseline, flat: settled but for them
        return settle_run(options, clock, clock.advance, sampler, progress=progress.append,
                          held=scanner)  # fmt: skip

    result = run()
    assert (result.settled, result.reason, len(result.samples)) == (False, "timeout", 21)
    assert result.held is not None
    assert settle_summary(result, options) == (
        "not settled after 20 s: held by orphans: 4 processes, 9.0 GiB (pid 201, 202, 300, 401), "
        "given back only when they end; --kill-orphans kills those that are pacer's synthesis "
        "processes"
    )
    assert progress[0] == "0 s: used 100.0 GiB, first sample; held by orphans: 4 processes, 9.0 GiB"
    report = result.as_json()["held_by_orphans"]
    assert isinstance(report, dict)
    assert report["held_bytes"] == 9 * GIB
    assert report["processes"][0] == {
        "pid": 201, "name": "pacer-synth", "cmdline": FORKSERVER, "owners": [200], "blocks": 2,
        "unlinked": 2, "resident_bytes": 8 * GIB, "synthesis": True,
    }  # fmt: skip

    for pid in (201, 202, 300, 401):  # they ended
        shutil.rmtree(tmp_path / str(pid))
    result = run()
    assert (result.settled, result.reason, result.settled_at_s) == (True, "baseline", 0.0)
    assert result.held == Held()


def test_kill_orphans_kills_pacers_synthesis_processes_and_only_names_the_others(
    tmp_path: Path,
) -> None:
    host_with_orphans(tmp_path)
    told: list[str] = []
    killed: list[int] = []

    def kill(holder: BlockHolder) -> bool:
        killed.append(holder.pid)
        return holder.pid != 401  # 401 ended just before

    reported = ReportedHolders(
        HeldBlockScanner(tmp_path), told.append, kill_orphans=True, kill=kill
    )
    assert len(reported().holders) == 4
    assert killed == [201, 401]  # 202, a forkserver's child of another program, is not pacer's
    assert [line.split(" (")[0] for line in told] == [
        "killed pacer synthesis process 201",
        "process 202",
        "process 300",
    ]
    assert told[1].endswith(": not a pacer synthesis process, so not killed")
    reported()  # each is told of once; one that could not be killed is tried again
    assert (len(told), killed) == (3, [201, 401, 401])

    named: list[str] = []
    ReportedHolders(HeldBlockScanner(tmp_path), named.append)()  # without --kill-orphans
    assert len(named) == 4
    assert named[0].endswith("8.0 GiB resident: memory that is not given back while it lives")


# A process that maps a pool block of a pacer that is gone (the PID in the name is of a process
# that has exited) and has unlinked it, as a synthesis process left behind would; named as
# pacer names its synthesis processes when asked to.
HOLD_AN_ORPHANED_BLOCK = """
import mmap, os, sys
from gpu.procs import lifeline
from gpu.procs.lifeline import SYNTHESIS_PROCESS_NAME
name, size = sys.argv[1], int(sys.argv[2])
if sys.argv[3] == "synthesis":
    lifeline.name_process(SYNTHESIS_PROCESS_NAME)
path = os.path.join(os.environ["PACER_GPU__SHM_DIR"], name)
descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.ftruncate(descriptor, size)
block = mmap.mmap(descriptor, size)
os.close(descriptor)
os.unlink(path)
block.write(b"x" * size)  # resident
print("holding", flush=True)
sys.stdin.read()
"""


def dead_pid() -> int:
    """The PID of a process that has exited."""
    with subprocess.Popen([sys.executable, "-c", "pass"]) as gone:
        pass
    return gone.pid


@pytest.mark.parametrize("kind", ["synthesis", "other"])
@pytest.mark.slow
def test_a_child_mapping_an_unlinked_block_of_a_dead_pacer_holds_settle_up(
    kind: str, clock: FakeClock, shm_dir: str
) -> None:
    owner = dead_pid()
    block = f"{BLOCK_PREFIX}{owner}-0"
    size = 8 * MIB
    args = [sys.executable, "-c", HOLD_AN_ORPHANED_BLOCK, block, str(size), kind]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    check_once = SettleOptions(timeout_s=0, baseline_bytes=100 * GIB)
    told: list[str] = []
    with subprocess.Popen(args, **pipes) as child:  # type: ignore[call-overload]
        assert child.stdout.readline() == "holding\n"
        scanner = HeldBlockScanner(prefix=f"{BLOCK_PREFIX}{owner}-", directory=shm_dir)
        held = ReportedHolders(scanner, told.append, kill_orphans=True)
        result = settle_run(check_once, clock, clock.advance, ListSampler([Sample(100 * GIB)]),
                            held=held)  # fmt: skip
        assert not result.settled
        assert result.held is not None
        [holder] = result.held.holders
        assert (holder.pid, holder.owners, holder.unlinked) == (child.pid, (owner,), 1)
        assert holder.resident_bytes == result.held.held_bytes == size
        assert HOLD_AN_ORPHANED_BLOCK.strip().splitlines()[0] in holder.cmdline
        assert holder.synthesis == (kind == "synthesis")
        if kind == "synthesis":
            assert told == [f"killed {holder}"]
            assert child.wait(5) == -signal.SIGKILL
        else:
            assert told == [f"{holder}: not a pacer synthesis process, so not killed"]
            assert not kill_holder(dataclasses.replace(holder, started=holder.started + 1))
            assert child.poll() is None  # another process than the one found: left alone
            child.kill()
            child.wait()
        result = settle_run(check_once, clock, clock.advance, ListSampler([Sample(100 * GIB)]),
                            held=scanner)  # fmt: skip
        assert (result.settled, result.held) == (True, Held())


def test_the_command_names_the_holders_and_exits_1(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    shm_dir: str,
) -> None:
    host_with_orphans(tmp_path / "proc", shm_dir)  # where PACER_GPU__SHM_DIR says
    monkeypatch.setattr(
        "pacer.settle.cli.HeldBlockScanner",
        lambda directory: HeldBlockScanner(tmp_path / "proc", directory=directory),
    )
    argv = ["--timeout", "0", "--process-name", "", "--state-file", str(tmp_path / "s.json"),
            "--baseline", "1TiB"]  # fmt: skip
    status, out, err = cli(argv, capsys)  # used memory is at the baseline: only they hold it up
    assert status == 1
    assert out.startswith(
        "not settled after 0 s: held by orphans: 4 processes, 9.0 GiB (pid 201, 202, 300, 401)"
    )
    named = [line for line in err.splitlines() if "pool block" in line]
    assert len(named) == 4
    assert named[2] == (
        "pacer settle: process 300 (python3 look.py) maps 1 pool block of dead pacer 200 "
        "(0 unlinked), 1.0 GiB resident: memory that is not given back while it lives"
    )
    assert not (tmp_path / "s.json").exists()  # nothing settled, nothing remembered
    status, out, _ = cli([*argv, "--json"], capsys)
    report = json.loads(out)
    assert (status, report["settled"], report["held_by_orphans"]["held_bytes"]) == (
        1,
        False,
        9 * GIB,
    )
