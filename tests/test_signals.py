"""Signals: the first drains (SIGUSR2 also hands the pool over), a second cuts the drain short,
a third hurries again (a stop waiting for the journal waits no more), and the handlers there
were come back. SIGQUIT and the signals pacer ignores are logged and change nothing."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest

from pacer.runtime.signals import IGNORED, SIGNALS, STACKS, Signals, sd_notify
from tests.waits import until


@pytest.mark.asyncio
async def test_first_signal_stops_a_second_hurries_and_the_old_handlers_return() -> None:
    before = {signum: signal.getsignal(signum) for signum in SIGNALS}
    hurried = asyncio.Event()
    calls: list[int] = []

    def on_second() -> None:
        calls.append(1)
        hurried.set()

    signals = Signals(on_second)
    with signals.installed():
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(signals.stop.wait(), 10)
        assert (signals.forced, calls) == (False, [])
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.wait_for(hurried.wait(), 10)
        assert signals.forced
        os.kill(os.getpid(), signal.SIGTERM)
        await until(lambda: len(signals.received) == 3, "the third signal to be handled")
    assert calls == [1, 1]
    assert signals.received == [signal.SIGTERM, signal.SIGINT, signal.SIGTERM]
    assert {signum: signal.getsignal(signum) for signum in SIGNALS} == before


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("signum", "handover"),
    [(signal.SIGUSR2, True), (signal.SIGTERM, False)],
    ids=["sigusr2", "sigterm"],
)
async def test_sigusr2_drains_and_hands_the_pool_over(signum: int, handover: bool) -> None:
    signals = Signals(lambda: None)
    with signals.installed():
        os.kill(os.getpid(), signum)
        await asyncio.wait_for(signals.stop.wait(), 10)
    assert (signals.handover, signals.forced) == (handover, False)


@pytest.mark.asyncio
@pytest.mark.parametrize("signum", [STACKS, *IGNORED], ids=lambda s: signal.Signals(s).name)
async def test_a_signal_that_is_not_a_stop_is_logged_and_changes_nothing(
    signum: int, caplog: pytest.LogCaptureFixture
) -> None:
    signals = Signals(lambda: None)
    name = signal.Signals(signum).name
    with caplog.at_level(logging.WARNING, "pacer.service"), signals.installed():
        os.kill(os.getpid(), signum)
        await until(lambda: f"signal {name}" in caplog.text, f"{name} to be logged")
        os.kill(os.getpid(), signal.SIGTERM)  # the next stop is still the first
        await asyncio.wait_for(signals.stop.wait(), 10)
    assert (signals.received, signals.forced) == ([signal.SIGTERM], False)
    said = "every thread's stack" if signum == STACKS else f"ignored: {IGNORED.get(signum)}"
    assert said in caplog.text


def test_sd_notify_without_a_socket_says_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sd_notify("READY=1") is False
