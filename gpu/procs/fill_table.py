"""The table of fills a `gpu.procs.executor.ProcessSynthesizer` and its worker processes share:
which fill each worker runs, and which fills are cancelled.

A fill may be cancelled at any moment from the token it runs under is taken until it returns,
and the service must then either kill the worker running it or be sure that none begins it,
knowing which. Each side writes its own word first and reads the other's second:

- the service marks the fill cancelled (`FillTable.cancel`), then reads which worker has
  recorded it (`FillTable.worker`) and kills that one;
- a worker records the fill it takes (`FillTable.record`), then reads whether it is cancelled
  (`FillTable.cancelled`) before it begins; done, it clears its record (`FillTable.clear`) and
  reads the mark again before it takes another fill.

Whichever side writes second reads the other's word. So a cancel never misses a fill that
would run on (the service sees the record, or the worker sees the mark), and never kills a
worker that has moved on to another fill (where the service saw the record, the worker sees the
mark before it takes the next). That needs the two writes in one order both sides see: plain
stores to shared memory are not (a processor may let a load pass its own earlier store, and
both sides would read the other's old word), so the table is a memfd written with pwrite and
read with pread: Linux serializes the writes to one file (each holds the file's lock), and each
side reads only after its own write has returned. Nothing is held between calls: a worker
stopped or killed anywhere holds up no fill and no cancel.
"""

from __future__ import annotations

import os
import struct

__all__ = ["FILL_ENTRIES", "PID_LIMIT", "FillTable"]

FILL_ENTRIES = 4096
"""Entries of each half of the table: fill ``token`` is at ``token % FILL_ENTRIES``, so far more
than can run at once."""
PID_LIMIT = 1 << 22
"""Above every PID Linux gives (``pid_max`` at most): a record holds ``token × PID_LIMIT +
pid``, so it names both the fill and its worker."""

_WORD = struct.Struct("=q")


class FillTable:
    """Two halves of `FILL_ENTRIES` words in a memfd: the record of the worker running each
    fill (written by the workers), and the token of each fill cancelled (written by the
    service). Made in the service (`create`), opened by path in each worker (`open`).

    A fill's entry is shared with every token `FILL_ENTRIES` apart: a record or a mark names
    its token, and one of another token is not this fill's.
    """

    def __init__(self, descriptor: int, path: str) -> None:
        self._descriptor = descriptor
        self.path = path

    @classmethod
    def create(cls) -> FillTable:
        """A new table, empty, in the service: the workers open it by `path`."""
        descriptor = os.memfd_create("pacer-fills", os.MFD_CLOEXEC)
        try:
            os.ftruncate(descriptor, 2 * FILL_ENTRIES * _WORD.size)
        except BaseException:
            os.close(descriptor)
            raise
        return cls(descriptor, f"/proc/{os.getpid()}/fd/{descriptor}")

    @classmethod
    def open(cls, path: str) -> FillTable:
        """The service's table at ``path``, in a worker."""
        return cls(os.open(path, os.O_RDWR | os.O_CLOEXEC), path)

    def record(self, token: int) -> None:
        """In a worker: this process runs fill ``token``."""
        self._write(_recorded_at(token), _record(token, os.getpid()))

    def clear(self, token: int) -> None:
        """In a worker: this process is done with fill ``token`` (a record another fill has
        written over since is left)."""
        at = _recorded_at(token)
        if self._read(at) == _record(token, os.getpid()):
            self._write(at, 0)

    def cancel(self, token: int) -> None:
        """In the service: fill ``token`` is cancelled."""
        self._write(_marked_at(token), token)

    def cancelled(self, token: int) -> bool:
        """Whether the service has cancelled fill ``token``."""
        return self._read(_marked_at(token)) == token

    def worker(self, token: int) -> int | None:
        """The PID of the worker recorded as running fill ``token``; None where none is."""
        entry = self._read(_recorded_at(token))
        return entry % PID_LIMIT if entry and entry // PID_LIMIT == token else None

    def close(self) -> None:
        if self._descriptor >= 0:
            os.close(self._descriptor)
            self._descriptor = -1

    def _write(self, at: int, word: int) -> None:
        os.pwrite(self._descriptor, _WORD.pack(word), at)

    def _read(self, at: int) -> int:
        word: int = _WORD.unpack(os.pread(self._descriptor, _WORD.size, at))[0]
        return word


def _record(token: int, pid: int) -> int:
    return token * PID_LIMIT + pid


def _recorded_at(token: int) -> int:
    return token % FILL_ENTRIES * _WORD.size


def _marked_at(token: int) -> int:
    return (FILL_ENTRIES + token % FILL_ENTRIES) * _WORD.size
