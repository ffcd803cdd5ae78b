"""Threads for workload calls that may never return.

Python cannot stop a thread, so a hung call is abandoned: its attempt fails and a new thread
takes its place (docs/decisions/hangs.md, D54). `DaemonPool` runs calls on daemon threads that
exit does not join. `CallState` decides whether the call's return or its timeout wins.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")
_Item = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]

_RUNNING, _FINISHED, _ABANDONED = 0, 1, 2


class CallState:
    """A call that either returns or is abandoned, never both: `finish` (where it returned)
    and `abandon` (where its time ran out) each say whether they won."""

    __slots__ = ("_state",)
    _lock = threading.Lock()  # one for all: held for a comparison, never contended for long

    def __init__(self) -> None:
        self._state = _RUNNING

    def _move(self, to: int) -> bool:
        with self._lock:
            if self._state != _RUNNING:
                return False
            self._state = to
            return True

    def finish(self) -> bool:
        """The call returned; False if it had been abandoned (its result is stale)."""
        return self._move(_FINISHED)

    def abandon(self) -> bool:
        """The call ran out of time; False if it had returned already."""
        return self._move(_ABANDONED)

    @property
    def abandoned(self) -> bool:
        return self._state == _ABANDONED


@dataclass(eq=False)
class _Thread:
    name: str
    future: Future[Any] | None = None  # the call it runs now
    abandoned: bool = False
    thread: threading.Thread | None = field(default=None, repr=False)


class DaemonPool:
    """Up to ``size`` daemon threads named ``name-N`` that run submitted calls.

    Threads start as calls need them. `replace` leaves an abandoned call's thread to finish, and
    starts a new one at once. Nothing joins the threads, not even interpreter exit.

    >>> pool = DaemonPool(2, "example")
    >>> pool.submit(sum, [1, 2, 3]).result()
    6
    >>> pool.shutdown()
    """

    def __init__(self, size: int, name: str) -> None:
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self.size = size
        self.name = name
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: set[_Thread] = set()  # serving the pool (abandoned ones excluded)
        self._abandoned: set[_Thread] = set()  # still running an abandoned call
        self._numbers = itertools.count()
        self._closed = False

    @property
    def threads(self) -> int:
        """Threads serving the pool now (started, not abandoned, not ended)."""
        return len(self._threads)

    @property
    def abandoned(self) -> int:
        """Threads still running a call that was abandoned."""
        return len(self._abandoned)

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``fn(*args)`` on a pool thread; its result or exception (any BaseException)
        goes to the future."""
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self.name}: the pool is shut down")
            self._queue.put((future, fn, args))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self.size:
                self._start()
        return future

    def replace(self, future: Future[Any]) -> bool:
        """The call behind ``future`` is abandoned: leave its thread to it and start another.

        False when no thread runs that call now (it returned, or never started)."""
        with self._lock:
            running = next((t for t in self._threads if t.future is future), None)
            if running is None:
                return False
            running.abandoned = True
            self._threads.discard(running)
            self._abandoned.add(running)
            if not self._closed:
                self._start()
            return True

    def shutdown(self) -> None:
        """Cancel the calls not started; idle threads end, busy ones after their call.
        Returns at once."""
        with self._lock:
            self._closed = True
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
            for _ in self._threads:
                self._queue.put(None)

    def _start(self) -> None:
        me = _Thread(f"{self.name}-{next(self._numbers)}")
        me.thread = threading.Thread(target=self._run, args=(me,), name=me.name, daemon=True)
        self._threads.add(me)
        me.thread.start()

    def _run(self, me: _Thread) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                with self._lock:
                    self._threads.discard(me)
                return
            future, fn, args = item
            if future.set_running_or_notify_cancel():
                with self._lock:
                    me.future = future
                try:
                    result = fn(*args)
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)
                    del result
                with self._lock:
                    me.future = None
                    if me.abandoned:  # a new thread took this one's place
                        self._abandoned.discard(me)
                        return
            self._idle.release()
