from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import pacer
from pacer.__main__ import main
from pacer.cli import jobs as cli_client
from pacer.cli.status import print_status
from pacer.config import Settings, load_settings
from pacer.sim.plot import Window, disturbances, draw
from pacer.sim.scenario import load_scenario, scenario_path, shipped_scenarios
from pacer.sim.suite import run_policy
from tests import env_file

SMALL = """\
name = "small"
duration_s = 900
seed = 5
[gpu]
workers = 2
service_s = { dist = "lognormal", median = 1.8, sigma = 0.1 }
[synthesis]
duration_s = { dist = "lognormal", median = 30.0, sigma = 0.2 }
threads_per_synthesis = 4
cores = 192
[partition]
bytes = 15032385536
[memory]
budget_bytes = 751619276800
[jobs]
partitions_per_job = 10
arrival = { kind = "backlog", jobs = 60 }
"""

JSON_KEYS = {
    "gpu_busy_ratio", "steady_gpu_busy_ratio", "throughput_partitions_per_s",
    "bound_throughput_partitions_per_s", "peak_inflight_partitions", "peak_inflight_bytes",
    "little_min_inflight", "peak_ready", "time_to_first_gpu_s", "time_to_steady_s",
    "idle_gap_p99_s", "bootstraps", "rebootstraps", "budget_violations", "partitions_completed",
}  # fmt: skip


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    return path


def test_simulate_prints_a_table(small: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(small)]) == 0
    out = capsys.readouterr().out
    assert "GPU busy ratio" in out
    assert "partitions completed            600" in out


@pytest.mark.parametrize("policy", ["pi", "cuzk", "cuzk-default", "unpaced", "fixed"])
def test_simulate_json(small: Path, policy: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(small), "--policy", policy, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) >= JSON_KEYS
    assert report["policy"] == policy
    if policy == "cuzk-default":  # 18 syntheses at once where the host runs 48: slower
        assert 0 < report["partitions_completed"] <= 600
    else:
        assert report["partitions_completed"] == 600
    assert 0 < report["gpu_busy_ratio"] <= 1


def test_fixed_concurrency_flag(small: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(small), "--policy", "fixed", "--concurrency", "7", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["peak_inflight_partitions"] == 7
    assert main(["simulate", str(small), "--concurrency", "7"]) == 2
    assert "--concurrency takes a number >= 1 and needs --policy fixed" in capsys.readouterr().err


def test_simulate_plot_writes_a_png(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.png"
    assert main(["simulate", str(small), "--plot", str(out)]) == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("median = 1.8", "median = -1.8"), "gpu.service_s.median: Input should be greater than 0"),
        (("workers = 2\n", ""), "gpu.workers: required key is missing"),
        (("cores = 192", "cores = 192\nthreads = 3"), "synthesis.threads: unknown key"),
        (
            ('dist = "lognormal", median = 30.0, sigma = 0.2', 'dist = "gamma"'),
            "synthesis.duration_s: Input tag 'gamma' found using 'dist' does not match",
        ),
        (
            ("budget_bytes = 751619276800", "budget_bytes = 1"),
            "partition.bytes (15032385536) must not exceed memory.budget_bytes (1)",
        ),
        (("[gpu]", "[gpu"), "not valid TOML"),
    ],
    ids=["negative", "missing", "unknown", "bad-dist", "cross-field", "toml-syntax"],
)
def test_bad_scenario_names_the_key(
    small: Path, edit: tuple[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    small.write_text(SMALL.replace(*edit))
    assert main(["simulate", str(small)]) == 2
    err = capsys.readouterr().err
    assert f"{small}: " in err
    assert message in err


def test_missing_scenario_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(tmp_path / "nope.toml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_suite_on_one_scenario_checks_targets(
    small: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 600 partitions are too few to amortize the first synthesis (~30 s of an ~9 min run):
    # the throughput target fails, and the exit status says so.
    assert main(["simulate", "--suite", str(small)]) == 1
    captured = capsys.readouterr()
    for policy in ("pi", "cuzk", "cuzk-default", "unpaced", "fixed"):
        assert f"small     {policy}" in captured.out
    assert re.search(r"throughput >= 0\.97 x bound +FAIL", captured.out)
    assert re.search(r"steady GPU busy >= min\(0\.995, best baseline - 0\.005\) +pass",
                     captured.out)  # fmt: skip
    assert "[1/1] small: pi and " in captured.err


def test_help_explains(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["simulate", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "cuzk" in out
    assert "--concurrency" in out
    assert "examples:" in out


def test_shipped_scenarios_are_packaged() -> None:
    assert len(shipped_scenarios()) >= 7


class StatusOnly:
    """A client that answers GET /v1/status with a recorded body."""

    base_url = "http://127.0.0.1:9470"

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def status(self) -> dict[str, Any]:
        return self.body


def status_body(pool: dict[str, Any]) -> dict[str, Any]:
    return {
        "draining": False, "ready": True, "workload": "ntt",
        "controller": {"policy": "unpaced", "mode": "pacing", "interval_s": 0.0,
                       "bootstraps": 0, "rebootstraps": 0},
        "queues": {"backlog": 64, "synthesizing": 16, "ready": 3, "proving": 2},
        "memory": {"inflight_bytes": 27 * 2**30, "budget_bytes": 64 * 2**30},
        "pool": pool,
        "synthesis": {"executor": "processes", "kernel": "numba", "restarts": 1,
                      "busy_ratio": 0.934, "busy_seconds": 812.5},
        "gpus": [{"gpu": 0, "workers": 2, "busy_ratio": 0.4, "busy_seconds": 1.0},
                 {"gpu": 1, "workers": 1, "busy_ratio": 0.97, "busy_seconds": 2.0}],
        "jobs": {"running": 1},
    }  # fmt: skip


def test_status_shows_memory_the_pinned_pool_and_each_gpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pool = {"backend": "shared-cuda", "total_bytes": 33 * 3 * 2**29, "in_use_bytes": 0,
            "slots_total": 33,
            "slots_free": 12, "checkouts": 900, "waits": 4, "fallbacks": 0,
            "allocations_after_warmup": 0}  # fmt: skip
    client: Any = StatusOnly(status_body(pool))
    assert print_status(client, argparse.Namespace(json=False)) == 0
    out = capsys.readouterr().out
    assert re.search(r"^memory +27\.00 / 64\.0 GiB in flight", out, flags=re.M), out
    assert re.search(
        r"^pinned pool +12 / 33 slots free \(49\.5 GiB, shared memory, cudaHostRegister\); "
        r"4 waits, 0 fallbacks, 0 allocations after warm-up",
        out,
        flags=re.M,
    ), out
    assert re.search(r"^gpus +0: 40% busy \(2 workers\), 1: 97% busy \(1 worker\)", out, re.M)
    synthesis = (
        r"^synthesis +processes, numba CPU backend \(1 restart after one died\); "
        r"workers 93% busy over the last minute$"
    )
    assert re.search(synthesis, out, re.M), out


def test_status_leaves_out_the_pool_when_there_is_none(capsys: pytest.CaptureFixture[str]) -> None:
    client: Any = StatusOnly(status_body({"total_bytes": 0, "in_use_bytes": 0}))
    assert print_status(client, argparse.Namespace(json=False)) == 0
    assert "pinned pool" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("changes", "state"),
    [
        ({}, "ready"),
        ({"ready": False, "reasons": ["starting"]}, "starting"),
        ({"ready": False, "draining": True, "reasons": ["draining: not accepting work"]},
         "draining: not accepting work"),
        ({"ready": False, "reasons": ["task dispatch crash-looping: 3 failures in a row, the "
                                      "last RuntimeError('x')", "stalled: work waiting and no "
                                      "progress for 301.0 s (limit 300 s)"]},
         "task dispatch crash-looping: 3 failures in a row, the last RuntimeError('x'); stalled: "
         "work waiting and no progress for 301.0 s (limit 300 s)"),
    ],
    ids=["ready", "starting", "draining", "reasons"],
)  # fmt: skip
def test_status_says_why_the_service_is_not_ready(
    changes: dict[str, Any], state: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client: Any = StatusOnly(status_body({"total_bytes": 0, "in_use_bytes": 0}) | changes)
    assert print_status(client, argparse.Namespace(json=False)) == 0
    assert re.search(rf"^state +{re.escape(state)}$", capsys.readouterr().out, re.M)


FAILURE = "partition 7 failed after 3 attempts: out of GPU memory"
LONG_ERROR = (
    "synthesis failed: the worker process died (killed by SIGKILL) while it wrote "
    "partition 9 of job 0123456789abcdef into its slot"
)


class JobOnly:
    """A client that answers a job's detail and a page of its partitions."""

    base_url = "http://127.0.0.1:9470"

    def __init__(self) -> None:
        self.pages: list[tuple[str, int, int]] = []

    def job(self, job_id: str) -> dict[str, Any]:
        return {
            "id": job_id, "state": "failed", "error": FAILURE, "partitions": 1000,
            "priority": 2, "params": {"log_n": 18}, "result_digest": None,
            "partitions_summary": {"pending": 989, "completed": 10, "failed": 1,
                                   "first_failures": [{"index": 7, "error": FAILURE}]},
        }  # fmt: skip

    def partitions(self, job_id: str, offset: int, limit: int) -> dict[str, Any]:
        self.pages.append((job_id, offset, limit))
        return {
            "next_offset": offset + limit,
            "partition_results": [
                {"index": 6, "state": "completed", "gpu": 0, "synthesis_s": 1.25, "gpu_s": 0.5,
                 "digest": "ab" * 32, "error": None},
                {"index": 7, "state": "failed", "gpu": 1, "synthesis_s": None, "gpu_s": None,
                 "digest": None, "error": FAILURE},
                {"index": 8, "state": "pending", "gpu": None, "synthesis_s": None, "gpu_s": None,
                 "digest": None, "error": None},
                {"index": 9, "state": "failed", "gpu": 1, "synthesis_s": 1.0, "gpu_s": None,
                 "digest": None, "error": LONG_ERROR},
            ],
        }  # fmt: skip


def test_status_of_a_job_shows_its_counts_failures_and_a_page(
    capsys: pytest.CaptureFixture[str],
) -> None:
    client: Any = JobOnly()
    args = argparse.Namespace(job="0123456789abcdef", json=False, offset=6, limit=2)
    assert cli_client._job_status(client, args) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^state +failed: {FAILURE}$", out, re.M), out
    # An ended job's partitions without a result were not tried; a failure is named once.
    assert re.search(r"^partitions +1000: 10 completed, 1 failed, 989 not tried$", out, re.M)
    assert re.search(rf"^failed +{FAILURE}$", out, re.M)
    assert re.search(r"^ +6 +completed +0 +1\.250 +0\.500 +abab", out, re.M), out
    assert re.search(r"^ +7 +failed +1 +- +- +partition 7 failed after", out, re.M), out
    assert re.search(r"^ +8 +not tried +- +- +-", out, re.M), out
    assert re.search(rf"^ +6 +completed .* {'ab' * 32}$", out, re.M), out  # the digest whole
    cut = re.search(r"^ +9 +failed .* (synthesis failed: .*)$", out, re.M)
    assert cut is not None, out
    assert cut[1].endswith("…")
    assert len(cut[1]) <= cli_client.ERROR_WIDTH
    assert LONG_ERROR.startswith(cut[1][:-1])
    assert "(more from --offset 8)" in out
    assert client.pages == [("0123456789abcdef", 6, 2)]


def test_status_of_a_job_asks_for_no_page_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    client: Any = JobOnly()
    args = argparse.Namespace(job="0123456789abcdef", json=True, offset=0, limit=0)
    assert cli_client._job_status(client, args) == 0
    assert json.loads(capsys.readouterr().out)["partitions"] == 1000
    assert client.pages == []


@pytest.mark.parametrize(
    ("journal", "shown"),
    [
        ({"healthy": True, "failing_s": 0.0, "error": None, "uncommitted_results": 0,
          "dispatch_held": False}, "ok"),
        ({"healthy": False, "failing_s": 42.4, "error": "database or disk is full",
          "uncommitted_results": 212, "dispatch_held": True},
         "FAILING for 42 s: database or disk is full; 212 results wait in memory, dispatch held"),
    ],
    ids=["healthy", "failing"],
)  # fmt: skip
def test_status_says_whether_the_journal_takes_writes(
    capsys: pytest.CaptureFixture[str], journal: dict[str, Any], shown: str
) -> None:
    client: Any = StatusOnly({**status_body({}), "journal": journal})
    assert print_status(client, argparse.Namespace(json=False)) == 0
    assert re.search(rf"^journal +{re.escape(shown)}$", capsys.readouterr().out, re.M)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"pacer {pacer.__version__}\n"


def test_simulate_runs_a_shipped_scenario_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "h200", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["scenario"] == "h200"
    assert report["partitions_completed"] > 0


def test_simulate_names_the_shipped_scenarios_when_one_is_unknown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "h300"]) == 2
    err = capsys.readouterr().err
    assert "h300: no shipped scenario of that name" in err
    assert "gpu-stall" in err
    assert "Traceback" not in err


def test_simulate_list_names_each_shipped_scenario_with_its_description(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "--list"]) == 0
    out = capsys.readouterr().out
    for path in shipped_scenarios():
        scenario = load_scenario(path)
        assert re.search(rf"^{re.escape(scenario.name)} +{re.escape(scenario.description)}$",
                         out, re.M), scenario.name  # fmt: skip


def test_every_shipped_scenario_has_a_one_line_description() -> None:
    for path in shipped_scenarios():
        scenario = load_scenario(path)
        assert scenario.name == path.stem  # the name --list shows is the one simulate takes
        assert 10 <= len(scenario.description) <= 90, scenario.name
        assert "\n" not in scenario.description


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--list", "h200"], "--list takes nothing else (got h200)"),
        (["--list", "--json"], "--list takes nothing else (got --json)"),
        (["--suite", "--policy", "cuzk"], "--suite runs every policy and draws nothing: drop "
                                          "--policy"),
        (["--suite", "--plot", "x.png"], "drop --plot"),
        (["--suite", "--json", "--markdown"], "--json and --markdown contradict each other"),
        (["h200", "--markdown"], "--markdown goes with --suite"),
        (["h200", "--concurrency", "4"], "needs --policy fixed"),
        (["h200", "--policy", "cuzk", "--concurrency", "4"], "needs --policy fixed"),
        ([], "simulate needs a SCENARIO"),
    ],
    ids=["list-scenario", "list-json", "suite-policy", "suite-plot", "json-markdown",
         "markdown-alone", "concurrency-alone", "concurrency-cuzk", "nothing"],
)  # fmt: skip
def test_simulate_refuses_flags_it_would_ignore_or_that_contradict(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""  # refused before anything ran


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing/run.png", "no directory"),
        ("run.xyz", "the name must end in a type matplotlib writes: "),
        ("run", "the name must end in a type matplotlib writes: "),
    ],
    ids=["missing-directory", "unknown-extension", "no-extension"],
)
def test_plot_where_none_can_be_written_is_refused_in_one_line(
    name: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "h200", "--plot", str(tmp_path / name)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # refused before the simulation ran
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith(f"pacer: --plot {tmp_path / name}: {message}")


@pytest.mark.parametrize(
    ("scenario", "windows"),
    [
        ("gpu-stall", [Window(100, 130, "GPU stalled")]),
        ("gpu-slowdown", [Window(1200, 2100, "GPU time x1.8")]),
        ("gpu-speedup", [Window(0, 100, "GPU time x2")]),
        ("synthesis-jump", [Window(1200, 3000, "synthesis x5")]),  # to the run's end
        ("worker-dies", [Window(1200, 3000, "3 of 4 workers")]),
        ("steady-backlog", []),
    ],
)
def test_disturbance_windows_come_from_the_scenario(scenario: str, windows: list[Window]) -> None:
    assert disturbances(load_scenario(scenario_path(scenario)), end_s=3000) == windows


def test_plot_keeps_legends_off_the_data_and_shows_the_budget_and_intervals(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import matplotlib.pyplot as plt

    raw, _ = run_policy(load_scenario(scenario_path("memory-bound")), "pi", Settings())
    fig = draw(raw, target_ready=8.0)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            legend = ax.get_legend()
            assert legend is not None
            assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
        memory = fig.axes[2]
        budget = [line for line in memory.get_lines() if "memory budget" in line.get_label()]
        assert budget
        assert budget[0].get_ydata()[0] == raw.scenario.memory_slots
        assert budget[0].get_zorder() > max(line.get_zorder() for line in memory.get_lines()
                                            if line is not budget[0])  # fmt: skip
        assert memory.get_ylim()[1] > raw.scenario.memory_slots * 1.05  # not on the frame
        interval = fig.axes[1]
        assert interval.get_yscale() == "log"
        used = [v for v in raw.trace.interval_s if v > 0]
        low, high = interval.get_ylim()
        assert low < min(used)
        assert max(used) < high < 10 * max(used)  # the data fills it
        labels = [t.get_text() for t in interval.get_yticklabels(minor=True) if t.get_text()]
        assert labels
        assert all("e" not in text and "^" not in text for text in labels), labels
    finally:
        plt.close(fig)


def test_serve_port_out_of_range_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--port", "70000"]) == 2
    assert "pacer: --port: Input should be less than or equal to 65535" in capsys.readouterr().err


def test_the_systemd_reading_used_below_follows_systemd() -> None:
    text = (
        '# a comment\nA=plain\nB=\'it\'"\'"\'s here\'\nC="say \\"hi\\" \\$x"\n'
        "D=trailing   \n  E = x\nF=\n;G=no\n"
    )
    assert env_file.parse(text) == {
        "A": "plain", "B": "it's here", "C": 'say "hi" $x', "D": "trailing", "E": "x", "F": "",
    }  # fmt: skip


def read_with_a_shell(path: Path) -> dict[str, str]:
    """The variables a POSIX shell sets from ``set -a; . FILE`` (a real one)."""
    script = f'set -a; . "{path}"; exec env -0'
    out = subprocess.run(["sh", "-c", script], env={"PATH": os.environ["PATH"]},
                         capture_output=True, check=True).stdout  # fmt: skip
    pairs = (entry.decode().partition("=") for entry in out.split(b"\0") if entry)
    return {name: value for name, _, value in pairs if name.startswith("PACER_")}


@pytest.mark.parametrize("reader", ["systemd", pytest.param("sh", marks=pytest.mark.slow)])
@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"PACER_CONTROLLER__KI": "0.02", "PACER_VERIFY_EVERY": "5", "PACER_NTT__LOG_N": "12",
         "PACER_JOURNAL__PATH": "/var/lib/pacer's state/a \"b\" $HOME `x` \\ j.sqlite",
         "PACER_MEMORY__BUDGET_BYTES": "700GiB"},
    ],
    ids=["defaults", "changed"],
)  # fmt: skip
def test_config_reads_back_as_an_environment_file_to_equal_settings(
    reader: str,
    changes: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in changes.items():
        monkeypatch.setenv(name, value)
    printed = Settings()
    assert main(["config"]) == 0
    path = tmp_path / "pacer.env"
    path.write_text(capsys.readouterr().out)
    variables = env_file.parse(path.read_text()) if reader == "systemd" else read_with_a_shell(path)
    assert "" not in variables.values()  # an empty value is refused: unset ones are comments
    for name in changes:
        monkeypatch.delenv(name)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert load_settings() == printed


def unit_environment() -> dict[str, str]:
    """The ``Environment=`` lines of the shipped systemd unit, as systemd sets them."""
    unit = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "pacer.service"
    lines = re.findall(r"^Environment=(.*)$", unit.read_text(), flags=re.M)
    return env_file.parse("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    "changes",
    [{}, {"PACER_CONTROLLER__KI": "0.02", "PACER_SYNTHESIS__CORES": "6"}],
    ids=["defaults", "changed"],
)
def test_config_as_the_units_environment_file_changes_nothing_the_unit_set(
    changes: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in changes.items():
        monkeypatch.setenv(name, value)
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    unit = unit_environment()
    assert {"PACER_GPU__KEEP_POOL", "PACER_JOURNAL__PATH"} <= unit.keys()
    written = env_file.parse(out)
    assert changes.items() <= written.items()
    set_here = {name: value for name, value in os.environ.items() if name.startswith("PACER_")}
    assert written == set_here  # only what was set
    assert {**unit, **written} == {**unit, **set_here}  # EnvironmentFile= comes after
    assert "\n#PACER_GPU__KEEP_POOL=false\n" in out  # the default, as a comment
    if not changes:
        assert re.search(r"\n#PACER_SYNTHESIS__CORES=\d+  \(derived from this host\)\n", out)


def test_config_never_prints_a_secret(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    token = "0123456789abcdef-secret"
    monkeypatch.setenv("PACER_API__TOKEN", token)
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert token not in out
    assert "\n#PACER_API__TOKEN=<set, not shown>\n" in out


def test_the_readme_starts_with_pacer_run_in_one_line() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    first = re.findall(r"```sh\n(.+?)\n```", readme, flags=re.S)[0]
    assert first == "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/pacer run"


def test_config_shows_resolved_values_as_comments_that_are_not_read_back() -> None:
    from pacer.cli.config_output import environment_file

    text = environment_file(Settings(), [("log_n", "18"), ("field", "goldilocks"), ("gpu", "")])
    assert text.endswith("\n\n# Resolved on this host from the settings above (not read back):\n"
                         "#   log_n = 18\n#   field = goldilocks\n#   gpu = (none)")  # fmt: skip
    assert env_file.parse(text) == env_file.parse(environment_file(Settings()))


def test_run_help_explains(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", "--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for text in ("--jobs N", "--partitions K", "--journal PATH", "temporary directory",
                 "Exit status: 0 when every job completed", "Ctrl-C drains the service",
                 "examples:"):  # fmt: skip
        assert text in out, text


def test_config_shows_what_the_settings_resolve_to_on_this_host(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PACER_NTT__LOG_N", "12")
    monkeypatch.setenv("PACER_VERIFY_EVERY", "7")
    assert main(["config"]) == 0
    resolved = capsys.readouterr().out.split("# Resolved on this host", 1)[1]
    rows = dict(re.findall(r"^#   (\w+) = (.*)$", resolved, re.M))
    assert (rows["workload"], rows["log_n"], rows["verify_every"]) == ("ntt", "12", "7")
    assert int(rows["partition_bytes"]) > 0  # decided by the workload: unset in the settings


def test_config_says_when_the_service_would_not_start_here(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PACER_WORKLOAD", "no_such_module:make")
    assert main(["config"]) == 2
    captured = capsys.readouterr()
    assert "\nPACER_WORKLOAD=no_such_module:make\n" in captured.out  # the file all the same
    assert "# Resolved on this host" not in captured.out
    assert captured.err.startswith("pacer: the service would not start on this host: "
                                   "PACER_WORKLOAD=no_such_module:make: cannot import")  # fmt: skip


@pytest.mark.parametrize(
    ("variable", "value", "status"),
    [("PACER_API__TOKEN", "abc", 0), ("PACER_JOURNAL__LEASE_S", "-1", 0),
     ("PACER_CONTROLLER__KP", "-1", 2)],
    ids=["token", "journal", "controller"],
)  # fmt: skip
def test_simulate_refuses_only_the_settings_it_reads(
    variable: str,
    value: str,
    status: int,
    small: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(variable, value)
    assert main(["simulate", str(small)]) == status
    err = capsys.readouterr().err
    assert (variable in err) == bool(status)


def test_config_still_refuses_a_bad_server_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PACER_API__TOKEN", "abc")
    assert main(["config"]) == 2
    assert "PACER_API__TOKEN" in capsys.readouterr().err


def test_the_suite_table_fits_100_columns_and_keeps_every_column(small: Path) -> None:
    from pacer.sim import table

    _, report = run_policy(load_scenario(small), "pi", Settings())
    longest = max((path.stem for path in shipped_scenarios()), key=len)
    reports = [dataclasses.replace(report, scenario=longest, policy=policy)
               for policy in ("pi", "unpaced", "cuzk", "cuzk-default")]  # fmt: skip
    text = table.suite(reports)
    assert max(len(line) for line in text.splitlines()) <= 100, text
    headers = [line for line in text.splitlines() if line.startswith("scenario ")]
    assert {h for line in headers for h in table.SUITE_HEADERS if h in line} == set(
        table.SUITE_HEADERS
    )
    markdown = table.suite(reports, markdown=True)  # one table, for bench/RESULTS.md
    assert markdown.splitlines()[0].count("|") == len(table.SUITE_HEADERS) + 1


def test_scenario_sizes_take_units_as_the_settings_do(small: Path, tmp_path: Path) -> None:
    with_units = tmp_path / "units.toml"
    text = SMALL.replace("bytes = 15032385536", 'bytes = "14GiB"')
    with_units.write_text(text.replace("budget_bytes = 751619276800", 'budget_bytes = "700GiB"'))
    assert load_scenario(with_units) == load_scenario(small)
    assert load_scenario(scenario_path("h200")).memory.budget_bytes == 120 * 2**30


def test_a_scenario_size_in_no_unit_names_the_key(
    small: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small.write_text(SMALL.replace("budget_bytes = 751619276800", 'budget_bytes = "700 GiBs"'))
    assert main(["simulate", str(small)]) == 2
    err = capsys.readouterr().err
    assert "memory.budget_bytes" in err
    assert "could not interpret byte unit: GiBs" in err


def test_a_plot_without_matplotlib_says_how_to_install_it(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["simulate", str(small), "--plot", str(tmp_path / "run.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pacer: --plot needs matplotlib, which the plot extra installs: ")
    assert "pip install -e '.[plot]'" in err
    assert err.count("\n") == 1
