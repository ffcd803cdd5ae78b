"""Waiting on what runs in real time (threads, processes, sockets, a real server): poll until a
condition holds, or fail naming what was awaited and what was last seen.

Logic on a virtual clock does not wait: its tests move the clock instead.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")
# The default bound of a wait: long enough for what takes a second or two on a quiet machine to
# happen on a loaded one (several times slower, and a pipeline paced to it slower still). A
# wait ends as soon as its condition holds: a long bound costs nothing where the tests pass.
WAIT_S = 120.0


def _timed_out(what: str, timeout_s: float, last: object) -> AssertionError:
    seen = "" if last is None or last is False else f"; last seen: {last!r}"
    return AssertionError(f"timed out after {timeout_s:g} s waiting for {what}{seen}")


@overload
async def until(
    poll: Callable[[], Awaitable[T]],
    what: str,
    *,
    done: Callable[[T], object] = ...,
    timeout_s: float = ...,
    every_s: float = ...,
) -> T: ...


@overload
async def until(
    poll: Callable[[], T],
    what: str,
    *,
    done: Callable[[T], object] = ...,
    timeout_s: float = ...,
    every_s: float = ...,
) -> T: ...


async def until(
    poll: Callable[[], Any],
    what: str,
    *,
    done: Callable[[Any], object] = bool,
    timeout_s: float = WAIT_S,
    every_s: float = 0.005,
) -> Any:
    """Call ``poll`` (a function or a coroutine function) every ``every_s`` until ``done`` of
    its value is true, and return that value; an AssertionError naming ``what`` (and the
    last value, if telling) after ``timeout_s`` of real time.

    ``await until(lambda: pipeline.idle, "the pipeline to be idle")``
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = poll()
        if inspect.isawaitable(value):
            value = await value
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout_s, value)
        await asyncio.sleep(every_s)


def wait_until(
    poll: Callable[[], T],
    what: str,
    *,
    done: Callable[[T], object] = bool,
    timeout_s: float = WAIT_S,
    every_s: float = 0.02,
) -> T:
    """`until` for code that blocks (a real process, a blocking client): the same contract,
    sleeping between polls.

    ``wait_until(lambda: server.proc.poll() is not None, "pacer serve to exit")``
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = poll()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout_s, value)
        time.sleep(every_s)
