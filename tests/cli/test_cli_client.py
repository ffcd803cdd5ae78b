"""`pacer submit` and `pacer status` before they reach a service: addresses, counts, waiting."""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import pytest

from pacer.__main__ import main
from pacer.cli import jobs as cli_jobs
from pacer.cli.args import Progress, param
from pacer.cli.follow import follow, rate_text, span_s, wait_ready
from pacer.cli.status import (
    engine_rows,
    fleet_rows,
    journal_rows,
    queue_rows,
    supply_rows,
    verification_rows,
)
from pacer.client import ApiError, BlockingClient
from tests.conftest import FakeClock
from tests.servers import refusing_port


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("localhost:9470", "it must start with http:// or https://"),
        ("htp://127.0.0.1:9470", "it must start with http:// or https://"),
        ("http://", "no host"),
        ("http://:9470", "no host"),
        ("http://127.0.0.1:99999", "Port out of range 0-65535"),
        ("http://127.0.0.1:port", "Port could not be cast to integer"),
        ("http://127.0.0.1:9470/?jobs=1", "no user, query or fragment"),
    ],
    ids=["no-scheme", "bad-scheme", "empty", "no-host", "port-range", "port-word", "query"],
)
@pytest.mark.parametrize("command", ["status", "submit"])
def test_a_malformed_url_fails_at_once(
    command: str, url: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--url", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pacer: --url: a service address is http://HOST[:PORT], got {url!r}: ")
    assert why in err
    assert err.count("\n") == 1


def test_a_service_address_keeps_its_path_prefix() -> None:
    assert BlockingClient("https://proxy.example/pacer/").base_url == "https://proxy.example/pacer"


HINT = (
    "is it running? Start it with `pacer serve`, or pass --url (or --timeout, to wait for it to "
    "start)\n"
)


def test_no_service_there_is_said_at_once_with_a_hint(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_jobs, "UNREACHABLE_S", 0.2)
    with refusing_port() as port:
        url = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        assert main(["status", "--url", url]) == 1
        took = time.monotonic() - started
    assert took < 15.0  # UNREACHABLE_S, with room for a loaded machine; not the 30 s timeout
    assert capsys.readouterr().err == (
        f"pacer: cannot reach pacer at {url}: Connection refused: {HINT}"
    )


def test_a_timeout_given_is_waited_for_a_service_to_start(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_jobs, "UNREACHABLE_S", 0.2)
    with refusing_port() as port:
        url = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        assert main(["cancel", "0123456789abcdef", "--url", url, "--timeout", "0.8"]) == 1
        assert time.monotonic() - started >= 0.8  # past UNREACHABLE_S: --timeout rules
    assert capsys.readouterr().err.endswith(
        f"pacer: not ready after 0.8 s: cannot reach pacer at {url}: Connection refused: {HINT}"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["submit", "--jobs", "0"], "argument --jobs: must be at least 1, got 0"),
        (["submit", "--jobs", "-3"], "argument --jobs: must be at least 1, got -3"),
        (["submit", "--jobs", "two"], "argument --jobs: must be a whole number, got 'two'"),
        (["submit", "--partitions", "0"], "argument --partitions: must be at least 1, got 0"),
        (["submit", "--timeout", "0"], "argument --timeout: must be more than 0 seconds"),
        (["submit", "--timeout", "nan"], "argument --timeout: must be more than 0 seconds"),
        (["submit", "--param", "=3"], "argument --param: takes NAME=VALUE, got '=3'"),
        (["status", "j1", "--limit", "-1"], "argument --limit: must be at least 0, got -1"),
        (["run", "--jobs", "0"], "argument --jobs: must be at least 1, got 0"),
        (["run", "--partitions", "0"], "argument --partitions: must be at least 1, got 0"),
        (["run", "--port", "0"], "argument --port: must be at least 1, got 0"),
        (["simulate", "h200", "--policy", "fixed", "--concurrency", "0"],
         "argument --concurrency: must be at least 1, got 0"),
    ],
    ids=["jobs-0", "jobs-negative", "jobs-word", "partitions-0", "timeout-0", "timeout-nan",
         "param-no-name", "limit-negative", "run-jobs-0", "run-partitions-0", "run-port-0",
         "concurrency-0"],
)  # fmt: skip
def test_nonsensical_counts_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["status", "--limit", "5"], "--limit and --offset page a job's partitions: give a JOB"),
        (["status", "j1", "--offset", "5"], "--offset needs --limit"),
    ],
    ids=["limit-without-job", "offset-without-limit"],
)
def test_status_refuses_page_arguments_it_would_ignore(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("log_n=18", ("log_n", 18)),
        ("field=goldilocks", ("field", "goldilocks")),
        ('faults=[{"call": "prove", "kind": "raise"}]',
         ("faults", [{"call": "prove", "kind": "raise"}])),
        ("x=NaN", ("x", "NaN")),  # not JSON: the API takes no NaN
        ("x=", ("x", "")),
    ],
    ids=["int", "word", "json", "nan", "empty"],
)  # fmt: skip
def test_param_values_are_json_or_else_strings(text: str, parsed: tuple[str, object]) -> None:
    assert param(text) == parsed


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_rewrites_one_line() -> None:
    stream = Terminal()
    progress = Progress(stream)
    progress.show("1/4")
    progress.show("2/4")
    progress.show("4/4", final=True)
    progress.end()  # already ended: nothing more
    assert stream.getvalue() == "\r1/4\x1b[K\r2/4\x1b[K\r4/4\x1b[K\n"


def test_progress_elsewhere_writes_a_line_at_most_every_interval(clock: FakeClock) -> None:
    stream = io.StringIO()
    progress = Progress(stream, every_s=5.0, clock=clock)
    progress.show("0/64")
    clock.advance(1.0)
    progress.show("8/64")  # too soon
    clock.advance(4.0)
    progress.show("20/64")
    progress.show("20/64", final=True)  # unchanged
    progress.show("64/64", final=True)
    progress.show("next stage")  # at once after a final line
    assert stream.getvalue().splitlines() == ["0/64", "20/64", "64/64", "next stage"]


def test_status_shows_a_fleets_host_and_nothing_for_a_host_alone() -> None:
    hosts = [{"host": "gpu-1", "partitions": 24}, {"host": "gpu-2", "partitions": 16}]
    fleet = {"host": "gpu-1", "leases": 3, "leased_partitions": 24, "reclaimed_partitions": 8,
             "pending_partitions": 1200, "hosts": hosts}  # fmt: skip
    assert fleet_rows(fleet) == [(
        "fleet",
        "host gpu-1: 3 leases (24 partitions), 8 partitions reclaimed; 1200 partitions left "
        "fleet-wide; leases held by gpu-1 24, gpu-2 16",
    )]  # fmt: skip
    assert fleet_rows(None) == []
    unknown = {**fleet, "pending_partitions": None, "hosts": None}  # a journal call hangs
    assert fleet_rows(unknown) == [(
        "fleet",
        "host gpu-1: 3 leases (24 partitions), 8 partitions reclaimed; the rest of the fleet "
        "not known: a journal call hangs",
    )]  # fmt: skip


def test_status_says_what_synthesis_can_supply_against_the_gpus() -> None:
    assert supply_rows(9.8, 0.08) == [
        ("supply", "synthesis 9.80/s against the GPUs' 12.50/s (0.78 of it): synthesis bounds")
    ]
    assert supply_rows(17.0, 0.08) == [
        ("supply", "synthesis 17.00/s against the GPUs' 12.50/s (1.36 of it): the GPUs bound")
    ]
    assert supply_rows(None, 0.08) == supply_rows(9.8, None) == []  # not known yet


def test_status_names_a_journal_call_past_its_limit() -> None:
    calls = [{"call": "complete_partitions", "thread": "pacer-journal_0", "running_s": 31.2},
             {"call": "claim", "thread": "pacer-claims_0", "running_s": 0.01}]  # fmt: skip
    journal = {"healthy": True, "failing_s": 0.0, "error": None, "uncommitted_results": 40,
               "dispatch_held": False, "stall_s": 30.0, "calls": calls}  # fmt: skip
    assert journal_rows(journal) == [("journal", "HUNG: call complete_partitions running for 31 s")]
    assert journal_rows({**journal, "calls": calls[1:]}) == [("journal", "ok")]
    failing = {**journal, "healthy": False, "failing_s": 12.0, "error": "disk I/O error"}
    assert journal_rows(failing) == [(
        "journal",
        "FAILING for 12 s: disk I/O error; 40 results wait in memory; HUNG: call "
        "complete_partitions running for 31 s",
    )]  # fmt: skip


def test_status_shows_each_engine_session() -> None:
    engine = {"engine": "cuzk-7", "connected": False, "mode": "pacing", "inflight": 12,
              "inflight_bytes": 12 * 2**30, "memory_budget_bytes": 64 * 2**30, "backlog": 40,
              "events": 900, "errors": {"unknown_partition": 2, "malformed": 1}}  # fmt: skip
    assert engine_rows([engine]) == [(
        "engine cuzk-7",
        "waiting to resume, pacing, 12 in flight (12.00 / 64.0 GiB), backlog 40, 900 events "
        "(3 refused)",
    )]  # fmt: skip
    assert engine_rows(None) == engine_rows([]) == []


class Starting:
    """A client of a service that answers after attempts failing at ``failures_s`` (s)."""

    base_url = "http://127.0.0.1:9"

    def __init__(self, failures_s: list[float]) -> None:
        self.failures_s = failures_s

    def wait_ready(
        self,
        timeout_s: float,
        path: str,
        waiting: Callable[[float, ApiError], None],
        unreachable_s: float | None = None,
    ) -> float:
        for elapsed_s in self.failures_s:
            waiting(elapsed_s, ApiError("cannot reach", "Connection refused"))
        return self.failures_s[-1]


@pytest.mark.parametrize(
    ("failures_s", "lines"),
    [([0.2, 3.0], []),
     ([0.2, 11.0], ["waiting for the service (Connection refused), 11 s of 120"])],
    ids=["within", "past"],
)  # fmt: skip
def test_a_start_is_waited_for_quietly_within_the_grace(
    failures_s: list[float], lines: list[str]
) -> None:
    stream = io.StringIO()
    client = cast(BlockingClient, Starting(failures_s))
    wait_ready(client, 120, Progress(stream), what="the service", quiet_s=10.0)
    shown = stream.getvalue().splitlines()
    assert shown[: len(lines)] == lines
    assert len(shown) == (2 if lines else 0)  # and, after waiting, that it is up


class Finishing:
    """A client following two jobs that end at once, 4 s apart on the service's clock."""

    def wait(
        self, ids: Sequence[str], progress: Callable[[list[dict[str, Any]], float], None],
        poll_s: float,
    ) -> list[dict[str, Any]]:  # fmt: skip
        jobs = [{"state": "completed", "partitions_done": 10, "created_at": 100.0,
                 "updated_at": 104.0 if job_id == "b" else 102.0} for job_id in ids]  # fmt: skip
        progress(jobs, 0.5)
        return jobs


def test_the_last_progress_line_has_the_summarys_rate() -> None:
    stream = io.StringIO()
    jobs = follow(cast(BlockingClient, Finishing()), ["a", "b"], 20, Progress(stream), started=0.0)
    assert stream.getvalue().splitlines() == ["20/20 partitions, 2/2 jobs ended, 4 s, "
                                              "5.0 partitions/s"]  # fmt: skip
    assert span_s(jobs) == 4.0
    assert rate_text(20, 4.0) == "5.0 partitions/s"  # what the summary shows


def test_status_says_what_waits_in_front_of_the_synthesis_processes() -> None:
    assert queue_rows(4, 0.3) == [
        ("synthesis queue", "up to 4 waiting for a synthesis process, covering a hand-off of "
                            "0.300 s")
    ]  # fmt: skip
    assert queue_rows(2, None) == [("synthesis queue", "up to 2 waiting for a synthesis process")]
    assert queue_rows(0, 0.3) == queue_rows(None, None) == []  # not known yet, or older service


def test_status_says_how_partitions_are_verified_and_what_was_skipped() -> None:
    status: dict[str, Any] = {
        "plan": {"verify_every": 100, "verify_threads": 1},
        "queues": {"verifying": 2},
        "calls": {"verifications_skipped": 7},
    }
    assert verification_rows(status) == [(
        "verification",
        "one partition in 100, on 1 thread of its own; 2 running or waiting; 7 skipped, the "
        "verify threads behind (PACER_VERIFY_THREADS)",
    )]  # fmt: skip
    status = {"plan": {"verify_every": 1, "verify_threads": 0}, "queues": {"verifying": 0},
              "calls": {"verifications_skipped": 0}}  # fmt: skip
    assert verification_rows(status) == [
        ("verification", "every partition, on the synthesis threads; 0 running or waiting")
    ]
    assert verification_rows({"plan": {"verify_every": 0}, "queues": {}}) == []
