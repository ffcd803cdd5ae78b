"""Which tier a test is in: the fixtures that put a test in the slow one.

A test that starts a process, serves on a socket or starts a database is slow (docs/testing.md,
"Test tiers"). A fixture of a test module that does so says it with ``@starts_something``
under its ``@pytest.fixture``; tests/conftest.py marks each test that takes it ``slow``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])

SLOW_FIXTURES = {
    "postgres_server", "postgres_url", "server", "server_factory", "promtool", "chromium",
}  # fmt: skip
"""The shared fixtures (tests/conftest.py) that start a process, a server on a socket or a
database: a test taking one is slow."""

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
