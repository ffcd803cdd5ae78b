"""The journal backend the settings name: the one place the service's backend is chosen."""

from __future__ import annotations

import time
from collections.abc import Callable

from pacer.config import JournalSettings
from pacer.journal.interface import JournalBackend
from pacer.journal.sqlite import SqliteJournal


def open_journal(
    settings: JournalSettings, clock: Callable[[], float] = time.time
) -> JournalBackend:
    """Open the journal ``settings`` name: the SQLite file at ``settings.path``, whose writes
    wait ``settings.busy_timeout_s`` for a lock. ``clock`` gives wall-clock seconds."""
    return SqliteJournal(settings.path, clock, settings.busy_timeout_s)
