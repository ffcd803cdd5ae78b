"""The journal backend the settings name: the one place the service's backend is chosen."""

from __future__ import annotations

import time
from collections.abc import Callable

from pacer.config import JournalSettings
from pacer.journal.fleet_backend import FleetBackend
from pacer.journal.health import JournalUnavailable
from pacer.journal.interface import JournalBackend
from pacer.journal.records import JournalRefusedError
from pacer.journal.sqlite import SqliteJournal


def open_journal(
    settings: JournalSettings, clock: Callable[[], float] = time.time
) -> JournalBackend:
    """Open the journal ``settings`` name: the SQLite file (`JournalSettings.sqlite_path`),
    whose writes wait ``settings.busy_timeout_s`` for a lock, or the fleet's PostgreSQL
    database (`open_fleet_journal`). ``clock`` gives wall-clock seconds to SQLite; a fleet
    keeps the database's, one clock for every host. JournalUnavailable where the file cannot
    be opened now (the disk full, read-only or failing: worth trying again)."""
    if settings.fleet:
        return open_fleet_journal(settings)
    try:
        return SqliteJournal(settings.sqlite_path, clock, settings.busy_timeout_s)
    except SqliteJournal.OperationalError as exc:  # the disk full, read-only, failing, ...
        raise JournalUnavailable(f"journal {settings.location}: {exc}") from exc


def open_fleet_journal(settings: JournalSettings) -> FleetBackend:
    """Connect to the fleet's PostgreSQL database (``settings.url``) as ``settings.host`` (the
    machine's name if unset) and bring its schema to this version. JournalRefusedError where
    the PostgreSQL driver is not installed; JournalUnavailable where the server cannot be
    reached."""
    try:
        from pacer.pgjournal import PgJournal
    except ImportError as exc:
        raise JournalRefusedError(
            f"PACER_JOURNAL__URL names a PostgreSQL database, but its driver is missing ({exc}):"
            " pip install 'pacer[postgres]'"
        ) from None
    try:
        return PgJournal.connect(
            settings.postgres_url, host=settings.host, lease_s=settings.lease_s,
            pool_size=settings.pool_size, timeout_s=settings.timeout_s,
        )  # fmt: skip
    except PgJournal.OperationalError as exc:
        raise JournalUnavailable(f"journal {settings.location}: {exc}") from exc
