"""`pacer serve`'s flags (as uvicorn names them) and its log formats."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from pacer.client import BlockingClient
from pacer.runtime import logs
from tests.servers import FAST, ROOT, free_port
from tests.waits import wait_until


def record(**context: object) -> logging.LogRecord:
    made = logging.LogRecord("pacer.service", logging.ERROR, __file__, 1, "job failed: %s",
                             ("out of memory",), None)  # fmt: skip
    for key, value in context.items():
        setattr(made, key, value)
    return made


def test_json_lines_carry_the_context_as_fields() -> None:
    entry = json.loads(logs.JsonFormatter().format(record(job="ab12", partition=3, gpu=0)))
    assert entry.pop("time").endswith("+00:00")
    assert entry == {"level": "ERROR", "logger": "pacer.service",
                     "message": "job failed: out of memory", "job": "ab12", "partition": 3,
                     "gpu": 0}  # fmt: skip


def test_json_lines_carry_the_traceback() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        made = record(task="dispatch")
        made.exc_info = sys.exc_info()
    entry = json.loads(logs.JsonFormatter().format(made))
    assert entry["task"] == "dispatch"
    assert "RuntimeError: boom" in entry["exception"]


def test_text_lines_carry_the_context_in_brackets() -> None:
    line = logs.ContextFormatter("%(levelname)s %(message)s").format(record(job="ab12", gpu=None))
    assert line == "ERROR job failed: out of memory [job=ab12]"


def test_setup_refuses_an_unknown_format() -> None:
    with pytest.raises(ValueError, match="log format must be one of text, json, got 'xml'"):
        logs.setup("info", "xml")


@contextlib.contextmanager
def root_logging_kept() -> Iterator[None]:
    """Put the root logger's handlers and level back after `logs.setup` replaced them."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_setup_logs_json_at_the_level_given(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    with root_logging_kept():
        logs.setup("warning", "json")
        logging.getLogger("pacer.test").info("not shown")
        logging.getLogger("pacer.test").warning("shown", extra={"job": "j1"})
    lines = stream.getvalue().splitlines()
    assert [json.loads(line)["message"] for line in lines] == ["shown"]
    assert json.loads(lines[0])["job"] == "j1"


@pytest.mark.slow
def test_serve_takes_host_and_port_and_logs_json_with_context(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, **FAST, "PACER_JOURNAL__PATH": str(tmp_path / "journal.sqlite"),
           "PACER_API__PORT": "1", "PACER_WORKLOAD": "tests.faults:make",
           "PACER_RETRY__BACKOFF_S": "0"}  # fmt: skip
    command = [sys.executable, "-m", "pacer", "serve", "--host", "127.0.0.1", "--port", str(port),
               "--log-level", "INFO", "--log-format", "json"]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, env=env, cwd=ROOT, stderr=out)
    try:
        # The flag's port, not PACER_API__PORT's.
        client = BlockingClient(f"http://127.0.0.1:{port}")
        client.wait_ready(30)
        fault = {"call": "prove", "index": 1, "kind": "raise", "times": 1}
        job = client.submit(2, {"faults": [fault]})
        wait_until(lambda: client.job(job)["state"] == "completed", "the job to complete")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    entries = [json.loads(line) for line in log.read_text().splitlines()]  # each line is JSON
    ready = next(e for e in entries if e["message"].startswith("pacer ready on"))
    assert f"http://127.0.0.1:{port} " in ready["message"]
    assert (ready["level"], ready["logger"]) == ("INFO", "pacer.service")
    datetime.fromisoformat(ready["time"])
    failed = next(e for e in entries if e["message"].startswith("proving failed"))
    assert (failed["job"], failed["partition"], failed["gpu"]) == (job, 1, 0)
    assert "RuntimeError: injected prove fault" in failed["exception"]


def test_a_public_host_from_the_flag_is_refused_naming_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pacer.__main__ import main

    assert main(["serve", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pacer: --host 0.0.0.0 is not a loopback address: set PACER_API__TOKEN")
    assert "PACER_API__HOST" not in err


@pytest.mark.slow
def test_a_port_in_use_is_one_line_and_exit_status_1(tmp_path: Path) -> None:
    env = {**os.environ, **FAST, "PACER_JOURNAL__PATH": str(tmp_path / "journal.sqlite"),
           "PACER_WORKLOAD": "noop"}  # fmt: skip
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [sys.executable, "-m", "pacer", "serve", "--port", str(port)]
        done = subprocess.run(
            command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
        )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"pacer: cannot listen on 127.0.0.1:{port}: address already in use (the address: "
        "--host or PACER_API__HOST; the port: --port or PACER_API__PORT)"
    ]


def test_an_os_error_at_the_start_is_one_line_and_its_traceback_goes_to_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pacer.__main__ import main
    from pacer.cli import serve

    def refused(settings: object) -> int:
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(serve, "_serve_from_first_steps", refused)
    monkeypatch.setenv("PACER_JOURNAL__PATH", str(tmp_path / "journal.sqlite"))
    with root_logging_kept():  # serving sets up the logs (`logs.setup`)
        assert main(["serve", "--port", str(free_port())]) == 1
    err = capsys.readouterr().err  # the log goes to stderr, then the one line
    assert "ERROR pacer.service cannot serve: [Errno 111] Connection refused\n" in err
    assert ", in refused\n" in err  # the traceback names where it was raised
    assert err.endswith("\npacer: cannot serve: [Errno 111] Connection refused\n")
