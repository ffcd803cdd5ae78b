"""Child processes that end when the process that started them dies, however it dies.

A process killed by SIGKILL runs no clean-up, so its children live on unless they notice.
Two things make them notice (docs/decisions/gpu.md, D104):

- A `Lifeline` is a pipe whose write end only the parent holds. Each child watches the read end
  on a daemon thread (`watch`). When the parent dies, the kernel closes the write end and the
  child exits. This works on any POSIX system, through a forkserver in between.
- `die_with_parent` asks Linux to SIGKILL the child when the *thread* that forked it ends. Use it
  only for children of a single-threaded parent, such as the forkserver's workers.

`name_process` sets the name ``ps -o comm`` shows, so ``pacer settle`` can tell pacer's
processes (`SYNTHESIS_PROCESS_NAME`). This module imports no NumPy.

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

    Pass ``reader`` to a child; a multiprocessing child gets its own copy when it is pickled.
    `cut` closes both ends and children still watching exit at once, so cut it last.
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
    """In a child: start and return a daemon thread that exits the process when the parent is gone.

    The exit status is `EXIT_ORPHANED`.
    """
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
    """Have the kernel send ``signum`` when the thread that forked this process ends.

    Uses Linux ``PR_SET_PDEATHSIG``; returns False where it is not available. If the parent died
    before this call, the process exits at once with status `EXIT_ORPHANED`.
    """
    parent = os.getppid()
    if not _prctl(_PR_SET_PDEATHSIG, signum):
        return False
    if os.getppid() != parent:  # the parent died just before the call
        os._exit(EXIT_ORPHANED)
    return True


def name_process(name: str) -> bool:
    """Set this thread's kernel name, cut to 15 bytes; return False where it cannot.

    For the main thread this is the process's ``comm``, which ``ps -o comm`` shows.
    """
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
