"""Engines' saved estimates: one entry per workload key, kept in the journal, so the next
session of an engine of the same workload starts warm (as the service's own controller does
from its journal)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Protocol

from pacer.control.estimates import Estimates
from pacer.service.assembly import saved_estimates


class WorkloadJournal(Protocol):
    """The journal's calls the store makes (`pacer.journal.JournalBackend` has them)."""

    def save_workload_estimates(self, key: str, values: Mapping[str, float | None]) -> None: ...

    def load_workload_estimates(self) -> dict[str, dict[str, float | None]]: ...


class EstimatesStore:
    """Estimates by workload key, kept in memory and, where ``journal`` is given (a function
    returning the open journal), in its ``workload_estimates`` table. `load` and `save` call
    the journal: run them on its thread.

    >>> store = EstimatesStore(None)
    >>> store.put("k", Estimates(1.5, 30.0, 3.0)); store.get("k")
    Estimates(gpu_service_s=1.5, synthesis_s=30.0, synthesis_sd_s=3.0)
    """

    def __init__(self, journal: Callable[[], WorkloadJournal] | None) -> None:
        self._journal = journal
        self._saved: dict[str, Estimates] = {}
        self._unsaved: set[str] = set()
        self.loaded = journal is None  # nothing to read without a journal

    def load(self) -> None:
        """Read every key's estimates from the journal (entries put meanwhile are kept);
        raises what the journal raises."""
        if self._journal is not None:
            for key, values in self._journal().load_workload_estimates().items():
                estimates = saved_estimates(values)
                if estimates is not None and key not in self._unsaved:
                    self._saved[key] = estimates
        self.loaded = True

    def get(self, key: str) -> Estimates | None:
        return self._saved.get(key)

    def put(self, key: str, estimates: Estimates) -> None:
        """Keep ``estimates`` under ``key`` where they are known (a session that learned
        nothing leaves the saved ones); `save` writes them."""
        if estimates.known:
            self._saved[key] = estimates
            self._unsaved.add(key)

    @property
    def unsaved(self) -> bool:
        """Whether entries were put since the last save."""
        return bool(self._unsaved)

    def save(self) -> None:
        """Write the entries put since the last save to the journal (no-op without one);
        raises what the journal raises, the entries not written kept for the next save."""
        if self._journal is None:
            self._unsaved.clear()
            return
        journal = self._journal()
        for key in sorted(self._unsaved):
            journal.save_workload_estimates(key, asdict(self._saved[key]))
            self._unsaved.discard(key)
