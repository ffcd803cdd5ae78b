"""The tiers' rule holds: a fast test that starts a process or listens on a socket is refused,
and a test taking a fixture that starts something is slow."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.tiers import REFUSED, FastTierError, starts_something


def test_a_fast_test_that_starts_a_process_or_listens_is_refused(
    request: pytest.FixtureRequest,
) -> None:
    with pytest.raises(FastTierError, match="not marked slow started a process"):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        with pytest.raises(FastTierError, match="not marked slow listened on a socket"):
            sock.listen()
    refused = request.node.stash[REFUSED]
    assert refused == ["started a process", "listened on a socket"]
    refused.clear()  # refused on purpose, checked above: the test itself passes


@pytest.mark.slow
def test_a_slow_test_may_start_a_process() -> None:
    assert subprocess.run([sys.executable, "-c", "pass"], check=False).returncode == 0


@pytest.fixture
@starts_something
def started() -> str:
    return "a fixture said to start something"


def test_a_test_taking_a_fixture_that_starts_something_is_slow(
    started: str, request: pytest.FixtureRequest
) -> None:
    assert request.node.get_closest_marker("slow") is not None
