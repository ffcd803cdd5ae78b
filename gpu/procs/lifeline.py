"""Child processes that end when the process that started them dies, however it dies.

A process killed with SIGKILL runs no clean-up: its children live on unless something in them
notices. Two things do, whatever the signal:

- a `Lifeline`: a pipe whose write end only the parent holds (never written, never inherited:
  pipes are opened close-on-exec, and the read end alone is passed to a child). Each child
  watches the read end on a daemon thread (`watch`); the kernel closes the write end when the
  parent dies, the read returns end of file, and the child exits. It works on every POSIX
  system and through any number of processes in between, such as multiprocessing's forkserver.
- `die_with_parent`: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux), so the kernel kills the child
  when its parent dies. "Parent" is the *thread* that forked it: armed in a process forked by
  a thread that ends before the process should, the child would be killed early, so it is for
  children of a single-threaded parent (the forkserver's workers), not for a process the
  service starts from a passing thread.

`name_process` sets the name the kernel shows (``ps -o comm``), so that ``pacer settle`` can
tell pacer's processes from others (`SYNTHESIS_PROCESS_NAME`). This module imports no NumPy.

>>> lifeline = Lifeline.open()
>>> lifeline.cut()  # children watching it exit now
>>> lifeline.cut()  # once is enough
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from multiprocessing import Pipe
from multiprocessing.connection import Connection

__all__ = [
    "EXIT_ORPHANED",
    "SYNTHESIS_PROCESS_NAME",
    "Lifeline",
    "die_with_parent",
    "name_process",
    "watch",
]

EXIT_ORPHANED = 70
"""A watching child's exit status when its parent has gone."""
SYNTHESIS_PROCESS_NAME = "pacer-synth"
"""What the kernel calls a synthesis process (``ps -o comm``, /proc/PID/stat): the name
`gpu.procs.executor` gives its workers, which ``pacer settle --kill-orphans`` looks for."""

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
COMM_LEN = 15  # the kernel keeps the first 15 bytes of a process name


class Lifeline:
    """A pipe whose write end only this process holds; children `watch` ``reader``.

    Pass ``reader`` to a child (a multiprocessing child gets its own copy of the descriptor
    when it is pickled, e.g. as an initializer argument). `cut` closes both ends: children
    still watching exit at once, so cut it only once they should be gone.
    """

    def __init__(self, reader: Connection, writer: Connection) -> None:
        self.reader = reader
        self._writer = writer

    @classmethod
    def open(cls) -> Lifeline:
        reader, writer = Pipe(duplex=False)  # os.pipe(): close-on-exec, so not inherited
        return cls(reader, writer)

    def cut(self) -> None:
        self._writer.close()
        self.reader.close()


def watch(reader: Connection, name: str = "lifeline") -> threading.Thread:
    """In a child: a daemon thread that ends this process (status `EXIT_ORPHANED`) once the
    parent holding the pipe's write end is gone. Returns the thread, started."""
    thread = threading.Thread(target=_exit_at_end_of_file, args=(reader,), name=name, daemon=True)
    thread.start()
    return thread


def _exit_at_end_of_file(reader: Connection) -> None:
    descriptor = reader.fileno()
    while True:
        try:
            if not os.read(descriptor, 1):
                break  # end of file: nothing holds the write end any more
        except OSError:
            break
    # The parent is gone and nobody will read what this process has; sys.exit on this thread
    # would end only the thread, while the main thread may be deep in a synthesis.
    os._exit(EXIT_ORPHANED)


def die_with_parent(signum: int = signal.SIGKILL) -> bool:
    """Have the kernel send ``signum`` to this process when the thread that forked it ends
    (Linux ``PR_SET_PDEATHSIG``); False where that is not available.

    A parent that died before this call leaves the process to a new parent, which the
    setting does not watch: this process then exits at once, with status `EXIT_ORPHANED`.
    """
    parent = os.getppid()
    if not _prctl(_PR_SET_PDEATHSIG, signum):
        return False
    if os.getppid() != parent:  # the parent died just before the call
        os._exit(EXIT_ORPHANED)
    return True


def name_process(name: str) -> bool:
    """Set the name the kernel shows for this thread (for the main thread: the process's
    ``comm``, what ``ps -o comm`` shows), cut to 15 bytes; False where it cannot."""
    return _prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:COMM_LEN]))


def _prctl(option: int, argument: int | ctypes.c_char_p) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        value = argument if isinstance(argument, ctypes.c_char_p) else ctypes.c_ulong(argument)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):  # no libc, or no prctl in it
        return False
