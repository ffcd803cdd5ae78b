"""Engines' saved estimates: one entry per workload key, so the next session of an engine of
the same workload starts warm (as the service's own controller does from its journal)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict
from pathlib import Path

from pacer.config import JournalSettings
from pacer.control.estimates import Estimates
from pacer.service.assembly import saved_estimates

log = logging.getLogger("pacer.engine")
SUFFIX = ".engines.json"


class EstimatesStore:
    """Estimates by workload key, kept in memory and, where ``path`` is set, in a JSON file
    written whole (a temporary file renamed over it) so a crash leaves the old or the new.

    >>> store = EstimatesStore(None)
    >>> store.put("k", Estimates(1.5, 30.0, 3.0)); store.get("k")
    Estimates(gpu_service_s=1.5, synthesis_s=30.0, synthesis_sd_s=3.0)
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._saved: dict[str, Estimates] = {}

    @classmethod
    def beside(cls, journal: JournalSettings) -> EstimatesStore:
        """The store beside an SQLite journal (its file name + `SUFFIX`); in memory only for a
        fleet's PostgreSQL journal."""
        if journal.fleet:
            return cls(None)
        path = journal.sqlite_path
        return cls(path.with_name(path.name + SUFFIX))

    def load(self) -> None:
        """Read the file, if there is one; an unreadable one is logged and left (cold starts)."""
        if self.path is None or not self.path.exists():
            return
        try:
            entries = json.loads(self.path.read_text(encoding="utf-8"))
            for key, values in dict(entries).items():
                estimates = saved_estimates(values)
                if estimates is not None:
                    self._saved[str(key)] = estimates
        except (OSError, ValueError, TypeError) as exc:
            log.warning("engine estimates in %s not read (%s): engines start cold", self.path, exc)

    def get(self, key: str) -> Estimates | None:
        return self._saved.get(key)

    def put(self, key: str, estimates: Estimates) -> None:
        """Keep ``estimates`` under ``key`` where they are known (a session that learned
        nothing leaves the saved ones)."""
        if estimates.known:
            self._saved[key] = estimates

    def save(self) -> None:
        """Write every entry to the file (no-op without one). OSError where it cannot."""
        if self.path is None:
            return
        text = json.dumps({k: asdict(v) for k, v in sorted(self._saved.items())}, indent=1)
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, self.path)
