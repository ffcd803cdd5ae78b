"""The table of fills that a `gpu.procs.executor.ProcessSynthesizer` shares with its workers.

It says which fill each worker runs and which fills are cancelled. Each side writes its own word
first and reads the other's second:

- The service marks a fill cancelled (`FillTable.cancel`), then reads which worker recorded it
  (`FillTable.worker`) and kills that one.
- A worker records the fill it takes (`FillTable.record`), then reads `FillTable.cancelled`
  before it begins. When done, it clears its record (`FillTable.clear`) and reads the mark again.

So a cancel never misses a fill that would run on, and never kills a worker that moved on. This
needs both writes in one order that both sides see, so the table is a memfd written with pwrite
and read with pread. Nothing is held between calls (docs/decisions/hangs.md, D118).
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
    """Two halves of `FILL_ENTRIES` words in a memfd: workers' records, and cancelled tokens.

    The workers write which fill they run; the service writes which fills are cancelled. The
    service makes the table (`create`); each worker opens it by path (`open`). Tokens
    `FILL_ENTRIES` apart share an entry, so each word names its token.
    """

    def __init__(self, descriptor: int, path: str) -> None:
        self._descriptor = descriptor
        self.path = path

    @classmethod
    def create(cls) -> FillTable:
        """Make a new, empty table in the service; the workers open it by `path`."""
        descriptor = os.memfd_create("pacer-fills", os.MFD_CLOEXEC)
        try:
            os.ftruncate(descriptor, 2 * FILL_ENTRIES * _WORD.size)
        except BaseException:
            os.close(descriptor)
            raise
        return cls(descriptor, f"/proc/{os.getpid()}/fd/{descriptor}")

    @classmethod
    def open(cls, path: str) -> FillTable:
        """Open the service's table at ``path``, in a worker."""
        return cls(os.open(path, os.O_RDWR | os.O_CLOEXEC), path)

    def record(self, token: int) -> None:
        """In a worker: record that this process runs fill ``token``."""
        self._write(_recorded_at(token), _record(token, os.getpid()))

    def clear(self, token: int) -> None:
        """In a worker: clear this process's record of fill ``token``, unless overwritten."""
        at = _recorded_at(token)
        if self._read(at) == _record(token, os.getpid()):
            self._write(at, 0)

    def cancel(self, token: int) -> None:
        """In the service: mark fill ``token`` cancelled."""
        self._write(_marked_at(token), token)

    def cancelled(self, token: int) -> bool:
        """Whether the service has cancelled fill ``token``."""
        return self._read(_marked_at(token)) == token

    def worker(self, token: int) -> int | None:
        """The PID of the worker recorded as running fill ``token``; None if none is."""
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
