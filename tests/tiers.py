"""Which tier a test is in: the fixtures that put a test in the slow one.

A test that starts a process, serves on a socket or starts a database is slow (docs/testing.md,
"Test tiers"). A fixture of a test module that does so says it with ``@starts_something``
under its ``@pytest.fixture``; tests/conftest.py marks each test that takes it ``slow``.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable, Iterable
from typing import TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., object])

SLOW_FIXTURES = {
    "postgres_server", "postgres_url", "server", "server_factory", "promtool", "chromium", "node",
}  # fmt: skip
"""The shared fixtures (tests/conftest.py) that start a process, a server on a socket or a
database: a test taking one is slow."""

MARK_IT = "mark it slow (docs/testing.md, 'Test tiers')"
REFUSED = pytest.StashKey[list[str]]()
"""In a test's stash: what the test was refused, in order (`refuse_starts`)."""


class FastTierError(AssertionError):
    """A test not marked slow started a process or listened on a socket."""


def refuse_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Until ``monkeypatch`` is undone, starting a process (``subprocess``, asyncio's
    subprocesses, ``os.fork``, ``os.posix_spawn``) or listening on a socket raises
    `FastTierError`. Returns the list each refusal is appended to, saying what was refused."""
    refused: list[str] = []

    def refuse(what: str) -> Callable[..., None]:
        def refusing(*args: object, **kwargs: object) -> None:
            refused.append(what)
            if args and isinstance(args[0], socket.socket):
                args[0].close()  # the caller holds a socket it may not use: leak none
            raise FastTierError(f"a test not marked slow {what}: {MARK_IT}")

        return refusing

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("started a process"))
    monkeypatch.setattr(os, "fork", refuse("started a process"))
    monkeypatch.setattr(os, "posix_spawn", refuse("started a process"))
    monkeypatch.setattr(socket.socket, "listen", refuse("listened on a socket"))
    return refused


_STARTING: set[tuple[str, str]] = set()


def starts_something(fixture: F) -> F:
    """Mark a fixture function as one that starts a process, a server or a database."""
    _STARTING.add((fixture.__module__, fixture.__qualname__))
    return fixture


def takes_a_slow_fixture(names: Iterable[str], functions: Iterable[object]) -> bool:
    """Whether a test with fixtures ``names``, defined by ``functions``, is slow by them."""
    if SLOW_FIXTURES.intersection(names):
        return True
    return any(
        (getattr(f, "__module__", None), getattr(f, "__qualname__", None)) in _STARTING
        for f in functions
    )
