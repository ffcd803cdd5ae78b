"""`pacer serve` as a real process: results, kill -9 and resume, SIGTERM drain, sd_notify."""

from __future__ import annotations

import re
import signal
import socket
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from gpu.reference.digest import digest
from gpu.reference.ntt import compute_h
from gpu.reference.synthesis import synthesize
from gpu.reference.verification import verify
from pacer.client import ApiError
from pacer.runtime.signals import IGNORED, STACKS
from pacer.workload import job_seed
from tests.servers import ServerFactory, readyz_refuses
from tests.waits import wait_until

pytestmark = pytest.mark.slow


def job_states(journal: Path) -> dict[str, str]:
    with sqlite3.connect(journal) as db:
        return dict(db.execute("SELECT id, state FROM jobs").fetchall())


def completions_in(log: str) -> Counter[str]:
    return Counter(re.findall(r"job completed: \w+ \[job=(\w+)\]", log))


def test_jobs_complete_with_verifiable_results(server_factory: ServerFactory) -> None:
    server = server_factory(PACER_GPU__WORKERS="2").start()
    ids = [server.client.submit(5, {"log_n": 9}) for _ in range(3)]
    wait_until(lambda: all(server.client.job(i)["state"] == "completed" for i in ids),
               "the jobs to complete")  # fmt: skip
    for job_id in ids:
        job = server.client.job(job_id)
        seed = job_seed(job_id, {})
        for part in job["partition_results"]:
            a, b, c = synthesize(seed, part["index"], 9)
            h = compute_h(a, b, c)
            assert verify(a, b, c, h)
            assert part["digest"] == digest(h)  # the service proved what we recompute
    server.signal(signal.SIGTERM)
    assert server.wait() == 0


def test_kill9_mid_run_then_restart_completes_every_job_exactly_once(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    # Each proof takes 0.1 s (one worker: 3.6 s for the 36 partitions), so the kill after the
    # eighth lands with most of the work still to do, however loaded the machine.
    slow = {"PACER_WORKLOAD": "tests.faults:make", "PACER_JOURNAL__COMMIT_INTERVAL_S": "0.02"}
    params = {"faults": [{"call": "prove", "kind": "slow", "seconds": 0.1}]}
    first = server_factory(**slow).start()
    ids = [first.client.submit(6, params) for _ in range(6)]
    journal = tmp_path / "journal.sqlite"

    def some_done() -> bool:
        return sum(int(first.client.job(i)["partitions_done"]) for i in ids) >= 8

    wait_until(some_done, "some partitions to complete")
    first.signal(signal.SIGKILL)
    first.wait()
    states = job_states(journal)
    assert sorted(states) == sorted(ids)  # every accepted job survived the kill
    assert any(s != "completed" for s in states.values()), "the kill came too late to test"

    second = server_factory(**slow).start()
    assert "jobs resumed" in second.log
    wait_until(lambda: all(s == "completed" for s in job_states(journal).values()),
               "the resumed jobs to complete")  # fmt: skip
    for job_id in ids:
        parts = second.client.job(job_id)["partition_results"]
        assert [p["state"] for p in parts] == ["completed"] * 6
    second.signal(signal.SIGTERM)
    assert second.wait() == 0
    # Each job completed exactly once: those the journal held completed at the kill in the
    # first service (whose log line, written after the commit, a SIGKILL may cut off), the
    # others in the second. Its log is read once it has stopped: a job's line follows its
    # commit, so the journal may show the job completed before the line is written.
    done_first = {i for i, s in states.items() if s == "completed"}
    assert completions_in(second.log) == Counter({i: 1 for i in ids if i not in done_first})
    logged_first = completions_in(first.log)
    assert set(logged_first) <= done_first
    assert max(logged_first.values(), default=0) <= 1


def test_sigterm_drains_then_exits_zero(server_factory: ServerFactory, tmp_path: Path) -> None:
    # Each proof takes 1 s, so the drain lasts long enough for /readyz to be seen failing.
    server = server_factory(PACER_WORKLOAD="tests.faults:make", PACER_SHUTDOWN__DRAIN_S="20")
    server.start()
    slow = {"faults": [{"call": "prove", "kind": "slow", "seconds": 1.0}]}
    job_id = server.client.submit(40, slow)
    wait_until(lambda: server.client.job(job_id)["partitions_done"] >= 2, "two partitions done")
    server.signal(signal.SIGTERM)

    # Draining: not ready, no new jobs.
    wait_until(lambda: readyz_refuses(server.client, "503"), "/readyz to fail")
    with pytest.raises(ApiError, match="503 draining: not accepting new jobs"):
        server.client.submit(1)
    assert server.wait(30) == 0
    log = server.log
    assert "draining: dispatch stopped" in log
    assert "stopped" in log
    state = job_states(tmp_path / "journal.sqlite")[job_id]
    assert state in ("running", "completed")  # what did not finish waits for the next start


def test_second_signal_forces_exit(server_factory: ServerFactory) -> None:
    server = server_factory(PACER_NTT__LOG_N="16", PACER_SHUTDOWN__DRAIN_S="60").start()
    server.client.submit(200)
    wait_until(lambda: server.client.status()["queues"]["synthesizing"] > 0, "a synthesis")
    server.signal(signal.SIGTERM)
    wait_until(lambda: "draining" in server.log, "the drain to start")
    server.signal(signal.SIGTERM)
    assert server.wait(10) == 1
    assert "second signal: exiting now" in server.log


def test_a_signal_that_is_not_a_stop_is_logged_and_pacer_serves_on(
    server_factory: ServerFactory,
) -> None:
    server = server_factory().start()
    for signum in (STACKS, *IGNORED):
        name = signal.Signals(signum).name
        server.signal(signum)
        wait_until(lambda: f"signal {name}" in server.log, f"{name} to be logged")  # noqa: B023
        assert server.proc is not None
        assert server.proc.poll() is None, server.log
        assert server.client.request("GET", "/readyz") == {"status": "ready"}
    log = server.log
    assert "signal SIGHUP ignored: pacer reads its settings only at start" in log
    assert "Current thread" in log  # SIGQUIT: every thread's stack, then pacer went on
    job_id = server.client.submit(2)
    wait_until(lambda: server.client.job(job_id)["state"] == "completed", "the job to complete")
    server.signal(signal.SIGTERM)
    assert server.wait() == 0


def test_sd_notify_ready_and_stopping(server_factory: ServerFactory, tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(20)
        server = server_factory(NOTIFY_SOCKET=str(path)).start()
        ready = sock.recv(4096).decode()
        assert ready.startswith("READY=1\nSTATUS=serving on port")
        server.signal(signal.SIGTERM)
        assert sock.recv(4096).decode().startswith("STOPPING=1")
        assert server.wait() == 0


def test_bad_settings_exit_with_a_message(server_factory: ServerFactory) -> None:
    server = server_factory(PACER_API__HOST="0.0.0.0").launch()
    assert server.wait() == 2
    assert "set PACER_API__TOKEN" in server.log
    assert "Traceback" not in server.log


def test_a_journal_url_that_does_not_parse_is_refused_naming_the_variable(
    server_factory: ServerFactory,
) -> None:
    server = server_factory(PACER_JOURNAL__URL="postgresql://pacer:hunter2@[::1/db").launch()
    assert server.wait() == 2
    assert "PACER_JOURNAL__URL: is not a URL a PostgreSQL database can be reached at" in server.log
    assert "Traceback" not in server.log
    assert "hunter2" not in server.log
