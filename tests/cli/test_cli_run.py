"""`pacer run` as a real process: it serves, submits, follows, drains and summarizes; it says
why when a job fails or the service dies; a signal drains the service, a second stops it."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pacer.cli.run import Journal, Run, summary
from pacer.cli.status import synthesis_rows
from pacer.client import BlockingClient
from tests.processes import descendants, running, wait_until_gone
from tests.servers import FAST, ROOT
from tests.waits import wait_until

SLOW_PROVE = json.dumps([{"call": "prove", "kind": "slow", "seconds": 0.05}])


class RunProcess:
    """``pacer run ARGS`` in ``tmp_path`` (its working and temporary directory)."""

    def __init__(self, tmp_path: Path, *args: str, **env: str) -> None:
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir(exist_ok=True)
        environment = {**os.environ, **FAST, "TMPDIR": str(self.tmp),
                       "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                       **env}  # fmt: skip
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pacer", "run", *args], cwd=tmp_path, env=environment,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self.err = ""

    def read_until(self, marker: str, timeout_s: float = 60.0) -> str:
        """Its stderr until a line holds ``marker``: what it printed so far."""
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        deadline = time.monotonic() + timeout_s
        while marker not in self.err:
            left = deadline - time.monotonic()
            assert left > 0, f"no {marker!r} in time; stderr so far:\n{self.err}"
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 65536)
                assert chunk, f"pacer run ended before {marker!r}; stderr:\n{self.err}"
                self.err += chunk.decode()
        return self.err

    def client(self) -> BlockingClient:
        url = re.search(r"serving on (http://\S+),", self.read_until("serving on"))
        assert url is not None
        return BlockingClient(url.group(1))

    def finish(self, timeout_s: float = 60.0) -> tuple[int, str, str]:
        """Its exit status, stdout and stderr, once it has exited."""
        out, err = self.proc.communicate(timeout=timeout_s)
        self.err += err.decode()
        return self.proc.returncode, out.decode(), self.err

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)


@pytest.fixture
def pacer_run(tmp_path: Path) -> Any:
    made: list[RunProcess] = []

    def start(*args: str, **env: str) -> RunProcess:
        made.append(RunProcess(tmp_path, *args, **env))
        return made[-1]

    yield start
    for run in made:
        run.stop()


@pytest.mark.slow
def test_run_completes_the_jobs_prints_a_summary_and_leaves_nothing_behind(
    pacer_run: Any, tmp_path: Path
) -> None:
    run = pacer_run("--jobs", "2", "--partitions", "3", PACER_NTT__CPU_BACKEND="numpy")  # no JIT
    status, out, err = run.finish()
    assert status == 0, err
    assert "waiting for" not in err  # a start within QUIET_START_S is no news
    assert "WARNING" not in err  # nor is the memory budget on a healthy start
    final = re.search(r"^6/6 partitions, 2/2 jobs ended, \d+ s, ([\d.]+ partitions/s)$", err, re.M)
    assert final, err
    assert re.search(r"^jobs +2 completed$", out, re.M), out
    assert re.search(r"^partitions +6 of 6 done$", out, re.M)
    # One definition of the rate: the progress line's last one is the summary's.
    assert re.search(rf"^throughput +{final[1]}$", out, re.M), out
    assert re.search(r"^workers +1 worker proving on the CPU, \d+% busy over the run$", out, re.M)
    assert re.search(r"^controller +pi: 1 cold bootstrap, 0 re-bootstraps$", out, re.M)
    assert re.search(r"^service +ready in [\d.]+ s; drained in [\d.]+ s, exit status 0$", out,
                     re.M)  # fmt: skip
    assert re.search(r"^journal +\S+/pacer-run-\w+/journal.sqlite \(temporary", out, re.M)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]  # no journal where it ran
    assert list(run.tmp.iterdir()) == []  # its temporary journal removed


@pytest.mark.slow
def test_run_keeps_a_journal_it_is_given(pacer_run: Any, tmp_path: Path) -> None:
    status, out, err = pacer_run("--jobs", "1", "--partitions", "1", "--journal", "j.sqlite",
                                 "--log-level", "info", PACER_WORKLOAD="noop").finish()  # fmt: skip
    assert status == 0, err
    assert "pacer ready on" in err  # the service's own log, at the level asked
    assert (tmp_path / "j.sqlite").exists()
    assert re.search(r"^journal +j\.sqlite$", out, re.M), out


@pytest.mark.slow
def test_run_keeps_the_sqlite_journal_a_url_names(pacer_run: Any, tmp_path: Path) -> None:
    status, out, err = pacer_run("--jobs", "1", "--partitions", "1", PACER_WORKLOAD="noop",
                                 PACER_JOURNAL__URL="sqlite:///u.sqlite").finish()  # fmt: skip
    assert status == 0, err
    assert (tmp_path / "u.sqlite").exists()
    assert re.search(r"^journal +u\.sqlite$", out, re.M), out


@pytest.mark.slow
def test_run_refuses_a_fleets_database(pacer_run: Any) -> None:
    status, out, err = pacer_run(PACER_JOURNAL__URL="postgresql://pacer@db/pacer").finish()
    assert (status, out) == (2, "")
    assert err.startswith("pacer run: PACER_JOURNAL__URL names a fleet's PostgreSQL database")


@pytest.mark.slow
def test_run_says_which_jobs_failed(pacer_run: Any) -> None:
    fail = json.dumps([{"call": "prove", "index": 1, "kind": "raise"}])
    run = pacer_run("--jobs", "1", "--partitions", "2", "--param", f"faults={fail}",
                    PACER_WORKLOAD="tests.faults:make", PACER_RETRY__MAX="1")  # fmt: skip
    status, out, err = run.finish()
    assert status == 1
    assert re.search(r"^\w+ +failed +2 +partition 1 failed after 1 attempt: proving failed: "
                     r"RuntimeError\('injected prove fault'\)$", out, re.M), out  # fmt: skip
    assert re.search(r"^jobs +1 failed$", out, re.M)
    assert err.endswith("pacer run: 1 of 1 jobs did not complete\n"), err


@pytest.mark.slow
def test_run_says_why_the_service_could_not_start(pacer_run: Any) -> None:
    status, out, err = pacer_run(PACER_WORKLOAD="no_such_module:make").finish()
    assert status == 1
    assert out == ""
    assert "pacer: PACER_WORKLOAD=no_such_module:make: cannot import no_such_module" in err
    assert err.endswith("pacer run: the service stopped before it was ready (exit status 2); "
                        "its log above says why\n"), err  # fmt: skip


@pytest.mark.slow
def test_run_says_so_when_the_service_dies_under_it(pacer_run: Any) -> None:
    run = pacer_run("--jobs", "1", "--partitions", "400", "--param", f"faults={SLOW_PROVE}",
                    PACER_WORKLOAD="tests.faults:make")  # fmt: skip
    run.read_until("jobs ended")
    (service,) = descendants(run.proc.pid)
    os.kill(service, signal.SIGKILL)
    status, _, err = run.finish()
    assert status == 1
    assert "the service stopped before the jobs ended (killed by SIGKILL)" in err


@pytest.mark.slow
def test_ctrl_c_drains_the_service_and_exits(pacer_run: Any) -> None:
    run = pacer_run("--jobs", "1", "--partitions", "400", "--param", f"faults={SLOW_PROVE}",
                    PACER_WORKLOAD="tests.faults:make")  # fmt: skip
    client = run.client()
    run.read_until("jobs ended")
    wait_until(lambda: client.status()["queues"]["proving"] > 0, "a partition proving")
    processes = descendants(run.proc.pid)
    run.proc.send_signal(signal.SIGINT)
    status, _, err = run.finish()
    assert status == 128 + signal.SIGINT
    assert "pacer run: SIGINT: draining the service (up to 60 s for work in flight" in err
    assert ("pacer run: interrupted; the service stopped (exit status 0); unfinished jobs were "
            "in its temporary journal, now removed") in err  # fmt: skip
    assert running(processes) == {}
    assert list(run.tmp.iterdir()) == []


@pytest.mark.slow
def test_a_second_signal_stops_the_service_at_once(pacer_run: Any) -> None:
    hang = json.dumps([{"call": "prove", "kind": "slow", "seconds": 60}])
    run = pacer_run("--jobs", "1", "--partitions", "2", "--param", f"faults={hang}",
                    "--log-level", "info", PACER_WORKLOAD="tests.faults:make")  # fmt: skip
    client = run.client()
    run.read_until("jobs ended")
    wait_until(lambda: client.status()["queues"]["proving"] > 0, "a partition proving")
    run.proc.send_signal(signal.SIGTERM)
    # Two signals pending at once are one: the second follows the service's first.
    run.read_until("draining: dispatch stopped")
    run.proc.send_signal(signal.SIGTERM)
    status, _, err = run.finish(timeout_s=30)  # not the 60 s the partition would take
    assert status == 128 + signal.SIGTERM
    assert "second signal: exiting now" in err
    assert "the service stopped (exit status 1)" in err


@pytest.mark.slow
def test_a_killed_run_leaves_no_service_behind(pacer_run: Any) -> None:
    run = pacer_run("--jobs", "1", "--partitions", "400", "--param", f"faults={SLOW_PROVE}",
                    PACER_WORKLOAD="tests.faults:make")  # fmt: skip
    run.read_until("jobs ended")
    processes = descendants(run.proc.pid)
    assert processes
    run.proc.kill()
    # The service drained on its own (SIGTERM when its parent died).
    wait_until_gone(processes, run.proc.pid, timeout_s=30)


def test_summary_shares_the_run_between_the_gpus() -> None:
    status = {
        "workload": "ntt",
        "synthesis": {"executor": "processes", "kernel": "numba", "restarts": 0,
                      "busy_ratio": 0.5, "busy_seconds": 256.0},
        "gpus": [{"gpu": 0, "workers": 2, "busy_seconds": 9.5},
                 {"gpu": 1, "workers": 1, "busy_seconds": 12.0}],
        "controller": {"policy": "pi", "bootstraps": 1, "rebootstraps": 2,
                       "estimates": {"gpu_service_s": 0.16, "synthesis_s": 1.4}},
        "memory": {"budget_bytes": 120 * 2**30, "configured_budget_bytes": 128 * 2**30,
                   "budget_clamped": True, "partition_bytes": 3 * 2**30,
                   "caps": {"inflight_partitions": 40, "synthesis_concurrency": 32}},
    }  # fmt: skip
    jobs = [
        {"state": "completed", "partitions_done": 16},
        {"state": "failed", "partitions_done": 4},
    ]
    text = summary(Run(jobs, status, 32, ready_s=1.25, run_s=10.0, drain_s=0.5, exit_status=0,
                       journal=Journal(Path("j.sqlite"), temporary=False)))  # fmt: skip
    rows = dict(re.findall(r"^(\w+) {2,}(.+)$", text, re.M))
    assert rows["jobs"] == "1 completed, 1 failed"
    assert rows["partitions"] == "20 of 32 done"
    assert rows["throughput"] == "2.0 partitions/s"
    # 256 s of the 32 synthesis workers' 320 over the run.
    assert rows["synthesis"] == ("processes, numba CPU backend (0 restarts after one died); "
                                 "workers 80% busy over the run")  # fmt: skip
    # A service from before the busy time: the row without it.
    older = {"executor": "threads", "kernel": None, "restarts": 0}
    assert synthesis_rows(older, lambda _: "never asked") == [("synthesis", "threads")]
    assert rows["gpus"] == "0: 95% busy (2 workers), 1: 100% busy (1 worker) over the run"
    assert rows["controller"] == "pi: 1 cold bootstrap, 2 re-bootstraps"
    assert rows["estimates"] == "GPU 0.160 s, synthesis 1.400 s a partition"
    assert rows["memory"] == ("120.0 GiB budget (128.0 GiB configured, clamped to the host), "
                              "3.0 GiB a partition")  # fmt: skip
    assert rows["caps"] == "40 partitions in flight, 32 syntheses at once"
    assert rows["service"] == "ready in 1.2 s; drained in 0.5 s, exit status 0"
    assert rows["journal"] == "j.sqlite"
