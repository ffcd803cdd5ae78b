"""The reference engine (examples/engine.py) as a process, paced by `pacer serve` as a process:
a run to the end, a pacer killed and started again while the engine runs on by its fallback,
then resumes with a fresh session told what is in flight, and an engine started before pacer."""

from __future__ import annotations

import json
import select
import sqlite3
import subprocess
import sys
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.servers import ROOT, ServerProcess, free_port
from tests.waits import wait_until

pytestmark = pytest.mark.slow
ENGINE = ROOT / "examples" / "engine.py"


def engine(port: int, name: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ENGINE), "--url", f"ws://127.0.0.1:{port}/v1/engine",
         "--engine", name, "--workload-key", f"key-{name}", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _first_line(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> str:
    """The first line ``proc`` prints, waiting at most ``timeout_s``."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    assert ready, f"the engine printed nothing in {timeout_s} s"
    return proc.stdout.readline()


def workload_estimates(path: Path) -> dict[str, Any]:
    """The engines' estimates in the journal file at ``path``, by workload key (read beside the
    serving pacer: WAL readers do not wait for it)."""
    with closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT workload_key, estimates FROM workload_estimates").fetchall()
    return {key: json.loads(blob) for key, blob in rows}


def test_the_reference_engine_runs_to_the_end_paced_by_pacer(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, PACER_WORKLOAD="noop").start()
    try:
        proc = engine(server.port, "ref-a", "--partitions", "40", "--gpu-s", "0.02",
                      "--synthesis-s", "0.05")  # fmt: skip
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
        assert out.strip().splitlines()[-1].startswith("engine: busy "), out
        saved = partial(workload_estimates, tmp_path / "journal.sqlite")
        wait_until(lambda: "key-ref-a" in saved(), "the session's estimates to be saved")
        assert saved()["key-ref-a"]["gpu_service_s"] > 0
        assert "event refused" not in server.log
    finally:
        server.stop()


def test_the_engine_goes_on_while_pacer_is_gone_and_redeclares_to_a_new_one(
    tmp_path: Path,
) -> None:
    server = ServerProcess(tmp_path, PACER_WORKLOAD="noop", PACER_API__PORT=str(free_port()))
    server.start()
    proc = engine(server.port, "restart-a", "--partitions", "240", "--synthesis-s", "0.5",
                  "--slots", "4", "--gpu-s", "0.05")  # fmt: skip
    try:
        wait_until(lambda: "engine restart-a opened session" in server.log, "the session")
        server.stop()  # SIGKILL: the engine paces by its fallback meanwhile
        begun = len(server.log)
        server.start()
        try:
            wait_until(lambda: "engine restart-a opened session" in server.log[begun:],
                       "a session with the new pacer", timeout_s=60)  # fmt: skip
        except AssertionError as exc:  # say what the engine did, and what the new pacer logged
            proc.kill()
            out, _ = proc.communicate(timeout=30)
            tail = server.log[begun:][-3000:]
            raise AssertionError(
                f"{exc}; the engine (exit {proc.returncode}) printed:\n{out}\n"
                f"the new pacer's log ends:\n{tail}"
            ) from None
        assert proc.poll() is None, "the engine ended before the new pacer served"
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, out
        new = server.log[begun:]
        assert "event refused" not in new, new[-3000:]
        assert "restart-a: session" in new  # its bye ended the new session
    finally:
        proc.kill()
        server.stop()


def test_an_engine_started_before_pacer_waits_by_its_fallback_then_runs_to_the_end(
    tmp_path: Path,
) -> None:
    """The first connection fails (nothing listens yet): the engine holds by its fallback,
    and connects once pacer serves. A pacer that dies before its first welcome sends the
    engine the same way."""
    port = free_port()
    proc = engine(port, "early-a", "--partitions", "20", "--gpu-s", "0.02",
                  "--synthesis-s", "0.05")  # fmt: skip
    server = ServerProcess(tmp_path, PACER_WORKLOAD="noop", PACER_API__PORT=str(port))
    try:
        first = _first_line(proc)  # it tried, and found nothing listening
        assert "pacer not reached" in first, first
        assert proc.poll() is None, "the engine ended with pacer away"
        server.start()
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
        assert out.strip().splitlines()[-1].startswith("engine: busy "), out
        assert "engine early-a opened session" in server.log
    finally:
        proc.kill()
        server.stop()
