"""The controller's estimates, saved in the SQLite journal so that a restart starts warm; how
any journal checks them and keeps them as JSON with their key."""

from __future__ import annotations

import json
from collections.abc import Mapping

from pacer.journal.connection import SqliteConnection
from pacer.journal.records import check_duration

_ESTIMATES_KEY = "key"  # beside the estimates in their JSON: what they are valid for


def estimates_json(values: Mapping[str, float | None], key: str | None) -> str:
    """The estimates (seconds, or None if unknown) and their ``key`` as the JSON a journal
    keeps; ``ValueError`` for a name or a value that cannot be saved."""
    for name, value in values.items():
        if not isinstance(name, str) or name == _ESTIMATES_KEY:
            raise ValueError(f"estimate names must be strings other than {_ESTIMATES_KEY!r}, "
                             f"got {name!r}")  # fmt: skip
        if value is not None:
            check_duration(f"estimate {name!r}", value)
    if key is not None and not isinstance(key, str):
        raise ValueError(f"the estimates' key must be a string, got {key!r}")
    return json.dumps({**values, _ESTIMATES_KEY: key}, sort_keys=True)


def estimates_of(saved: str | None) -> dict[str, float | None] | None:
    """The estimates in what `estimates_json` wrote; None if nothing was saved."""
    if saved is None:
        return None
    values = dict(json.loads(saved))
    values.pop(_ESTIMATES_KEY, None)
    return {k: None if v is None else float(v) for k, v in values.items()}


def estimates_key_of(saved: str | None) -> str | None:
    """The key in what `estimates_json` wrote; None if none was (or nothing was saved)."""
    key = None if saved is None else json.loads(saved).get(_ESTIMATES_KEY)
    return key if isinstance(key, str) else None


class SavedEstimates(SqliteConnection):
    """Saves and loads the controller's estimates (one row, replaced on each save)."""

    def save_estimates(self, values: Mapping[str, float | None], key: str | None = None) -> None:
        """Store the controller's estimates (seconds, or None if unknown), replacing those
        saved before, with ``key``: what they are valid for
        (``pacer.control.estimates.estimates_key``).
        """
        blob = estimates_json(values, key)
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO estimates (id, estimates) VALUES (1, ?)", (blob,))

    def _saved_estimates(self) -> str | None:
        row = self._db.execute("SELECT estimates FROM estimates WHERE id = 1").fetchone()
        return None if row is None else str(row[0])

    def load_estimates(self) -> dict[str, float | None] | None:
        """The estimates last saved, or None if none were."""
        return estimates_of(self._saved_estimates())

    def load_estimates_key(self) -> str | None:
        """The key the estimates were saved with; None if none was (or nothing was saved)."""
        return estimates_key_of(self._saved_estimates())
