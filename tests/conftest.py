from __future__ import annotations

import os

import pytest


class FakeClock:
    """A clock the test moves by hand: ``clock.advance(1.5)``."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def _clean_pacer_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests start from the defaults, whatever the developer's shell exports."""
    for key in list(os.environ):
        if key.startswith("PACER_"):
            monkeypatch.delenv(key)
    return
