"""What a journal file recorded of each proved partition's time, read without writing to it:
what `pacer tune` replays.

A completed partition's row keeps its synthesis and GPU seconds, the part of its synthesis
seconds spent waiting for a synthesis worker (its ``synthesis_wait`` phase, where recorded),
the seconds its proof took to check on the CPU (its ``verify`` phase, where it was checked),
and when its result was committed (``completed_at``, clock seconds; results are committed in
batches, so partitions of one batch share it); its job's row keeps when the job was accepted
(``created_at``). The journal keeps no partition's bytes, dispatch time or wait for a GPU, and
no duration of a failed attempt.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import NamedTuple

from pacer.journal.records import SYNTHESIS_WAIT, VERIFY, JournalFileError, PartitionState
from pacer.journal.schema import SCHEMA_VERSION, NewerSchemaError


class PartitionTiming(NamedTuple):
    """One completed partition: its job and when that was accepted, its index in the job, its
    synthesis seconds (dispatch to ready), the part of them it waited for a synthesis worker
    (None where the journal did not record it), its GPU seconds, when its result was
    committed (clock seconds), and the seconds its proof took to check on the CPU (None where
    it was not checked, or the journal did not record it)."""

    job_id: str
    job_created_at: float
    partition: int
    synthesis_s: float
    synthesis_wait_s: float | None
    gpu_s: float
    completed_at: float
    verify_s: float | None = None


class TimingSpan(NamedTuple):
    """How many completed partitions a journal holds, and when the first and the last were
    committed (clock seconds; None when there is none)."""

    partitions: int
    first_at: float | None
    last_at: float | None


def open_read_only(path: Path) -> sqlite3.Connection:
    """The journal file at ``path``, opened read-only: nothing is created, migrated or
    written, so a running service's file can be read. JournalFileError when there is no such
    file, it is no journal, or a newer pacer wrote it."""
    if not path.is_file():
        raise JournalFileError(path, f"journal {path}: no such file")
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        found = db.execute("PRAGMA user_version").fetchone()[0]
        if found > SCHEMA_VERSION:
            raise NewerSchemaError(path, found)
        if found < 1:
            raise JournalFileError(path, f"journal {path}: not a pacer journal (no schema)")
    except sqlite3.DatabaseError as exc:
        db.close()
        raise JournalFileError(path, f"journal {path}: not an SQLite journal ({exc})") from None
    except BaseException:
        db.close()
        raise
    return db


def span(db: sqlite3.Connection) -> TimingSpan:
    """The completed partitions of the whole journal: how many, the first and last commit."""
    count, first, last = db.execute(
        "SELECT COUNT(*), MIN(completed_at), MAX(completed_at) FROM partitions WHERE state = ?",
        (PartitionState.COMPLETED,),
    ).fetchone()
    return TimingSpan(count, first, last)


def completed(
    db: sqlite3.Connection, since: float | None = None, until: float | None = None
) -> list[PartitionTiming]:
    """The partitions completed with their result committed at or after ``since`` and before
    ``until`` (clock seconds; None: no bound), in the order of their commit, then of their job's
    arrival, then of their index."""
    where = ["p.state = ?", "p.synthesis_s IS NOT NULL", "p.gpu_s IS NOT NULL"]
    args: list[object] = [PartitionState.COMPLETED]
    if since is not None:
        where.append("p.completed_at >= ?")
        args.append(since)
    if until is not None:
        where.append("p.completed_at < ?")
        args.append(until)
    rows = db.execute(
        "SELECT p.job_id, j.created_at, p.idx, p.synthesis_s, p.phases, p.gpu_s, p.completed_at"
        " FROM partitions p JOIN jobs j ON j.id = p.job_id"
        f" WHERE {' AND '.join(where)} ORDER BY p.completed_at, j.created_at, j.seq, p.idx",
        args,
    )
    wait, check = SYNTHESIS_WAIT, VERIFY
    return [
        PartitionTiming(job, made, i, syn, _phase(phases, wait), gpu, at, _phase(phases, check))
        for job, made, i, syn, phases, gpu, at in rows
    ]


def _phase(phases: str, name: str) -> float | None:
    """Phase ``name`` of a row's phases (JSON), if it is a number of seconds >= 0."""
    try:
        value = json.loads(phases).get(name)
    except (ValueError, AttributeError):
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not value >= 0:
        return None
    return float(value)
