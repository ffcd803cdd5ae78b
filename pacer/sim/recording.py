"""Recorded partitions to replay (`pacer tune`): read from a journal file over a window of time,
or from a CSV trace; split into a part to tune on and a part held out; replayed as recorded or
resampled.

A trace's columns (a header row names them, in any order; docs/controller.md, "Tuning from a
recording"):

- ``synthesis_s``, ``gpu_s`` (required): a partition's synthesis and GPU seconds;
- ``synthesis_wait_s``: the part of ``synthesis_s`` it waited for a synthesis worker (default
  0), which the replay leaves out: its own executor queues partitions as the service does;
- ``arrival_s``: when its job arrived (s, any origin; default 0, all waiting at the start);
- ``job``: a label; rows with the same job and arrival_s form one job (default: one job per
  arrival_s);
- ``bytes``: the host memory it held (bytes, or with a unit: ``3GiB``);
- ``end_s``: when it finished (s, the clock of arrival_s): the time the hold-out splits by
  (default: the rows' order);
- ``verify_s``: the seconds its proof took to check on the CPU, where it was checked (default
  0: not checked); the replay holds its memory that long after its GPU work, on the
  service's verify threads (``PACER_VERIFY_THREADS``).

A journal gives each partition its job's ``created_at`` as the arrival, its commit time
(``completed_at``) as the end, its ``synthesis_wait`` phase as the wait and its ``verify``
phase as the check, where it recorded them (`pacer.journal.timings`).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from pydantic import ByteSize, TypeAdapter, ValidationError

from pacer.journal import timings
from pacer.journal.records import JournalFileError
from pacer.sim.engine import Replay

COLUMNS = (
    "synthesis_s", "gpu_s", "synthesis_wait_s", "arrival_s", "job", "bytes", "end_s", "verify_s",
)  # fmt: skip
REQUIRED = ("synthesis_s", "gpu_s")
SECONDS = (*REQUIRED, "synthesis_wait_s", "verify_s")  # durations: numbers >= 0
MIN_PARTITIONS = 8  # in each part a replay runs: fewer say nothing of a controller
FLOOR_S = 1e-6  # a duration recorded as 0 is replayed as this: the controller divides by it
_BYTES = TypeAdapter(ByteSize)


class RecordingError(Exception):
    """A recording cannot be read or split as asked; the message names the field and the rule."""


@dataclass(frozen=True)
class Recording:
    """Partitions in the order they ended; times in seconds.

    ``synthesis_s``: each one's synthesis, less the wait for a synthesis worker where that was
    recorded (``wait_s``, NaN where not); ``arrival_s``: when each one's job arrived; ``job``:
    which job (partitions of one job and arrival arrive together); ``end_s``: when it ended
    (the clock of ``arrival_s`` where ``timed``, else its place in the trace); ``bytes``: what
    it held, where recorded; ``verify_s``: how long its proof took to check on the CPU (0 where
    not checked; None where no partition's check was recorded). A job that arrived before
    ``origin_s`` (the start of a window, or of a held-out part) replays as arriving then.
    """

    source: str
    arrival_s: np.ndarray
    end_s: np.ndarray
    job: np.ndarray
    synthesis_s: np.ndarray
    gpu_s: np.ndarray
    bytes: np.ndarray | None = None
    timed: bool = True
    origin_s: float | None = None
    wait_s: np.ndarray | None = None
    dated: bool = True  # end_s are clock seconds (a journal's), else a trace's own seconds
    verify_s: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.synthesis_s)

    @property
    def waits(self) -> int:
        """How many partitions recorded their wait for a synthesis worker."""
        return 0 if self.wait_s is None else int(np.count_nonzero(~np.isnan(self.wait_s)))

    @property
    def checks(self) -> int:
        """How many partitions' proofs were checked on the CPU, by the recording."""
        return 0 if self.verify_s is None else int(np.count_nonzero(self.verify_s > 0))

    @property
    def jobs(self) -> int:
        return len(set(zip(self.arrival_s.tolist(), self.job.tolist(), strict=True)))

    @property
    def mean_synthesis_s(self) -> float:
        return float(np.mean(self.synthesis_s))

    @property
    def mean_bytes(self) -> int | None:
        return None if self.bytes is None else round(float(np.mean(self.bytes)))

    def describe(self) -> str:
        """``640 partitions of 40 jobs, ended 2026-12-01 10:00:00 to 10:12:31 UTC``; where the
        ends are a trace's own seconds (not ``dated``), ``ended at 3.3 to 267.5 s``."""
        text = f"{len(self)} partitions of {self.jobs} jobs"
        if self.timed and not self.dated:
            text += f", ended at {self.end_s[0]:.1f} to {self.end_s[-1]:.1f} s"
        elif self.timed:
            first, last = clock_text(self.end_s[0]), clock_text(self.end_s[-1])
            if first[:10] == last[:10]:
                first, last = first.removesuffix(" UTC"), last[11:]
            text += f", ended {first} to {last}"
        if self.waits and self.wait_s is not None:
            mean = float(np.nanmean(self.wait_s))
            text += f"; synthesis less its wait for a worker (mean {mean:.3g} s"
            text += ")" if self.waits == len(self) else f", {self.waits} recorded one)"
        if self.checks and self.verify_s is not None:
            mean = float(np.mean(self.verify_s[self.verify_s > 0]))
            text += f"; {self.checks} checked on the CPU (mean {mean:.3g} s)"
        return text

    def _take(self, keep: np.ndarray, origin_s: float | None) -> Recording:
        return replace(
            self, arrival_s=self.arrival_s[keep], end_s=self.end_s[keep], job=self.job[keep],
            synthesis_s=self.synthesis_s[keep], gpu_s=self.gpu_s[keep],
            bytes=None if self.bytes is None else self.bytes[keep], origin_s=origin_s,
            wait_s=None if self.wait_s is None else self.wait_s[keep],
            verify_s=None if self.verify_s is None else self.verify_s[keep],
        )  # fmt: skip

    def split(self, holdout: float) -> tuple[Recording, Recording | None]:
        """The part to tune on and the part held out: the partitions that ended in the last
        ``holdout`` share of the time from the first end to the last (0: none held out).
        RecordingError unless each part holds MIN_PARTITIONS."""
        if holdout == 0:
            return self, None
        first, last = float(self.end_s[0]), float(self.end_s[-1])
        cut = last - holdout * (last - first)
        early = self.end_s < cut
        tune, held = self._take(early, self.origin_s), self._take(~early, cut)
        if not self.timed:
            held = replace(held, origin_s=None)
        for name, part in (("the part tuned on", tune), ("the part held out", held)):
            if len(part) < MIN_PARTITIONS:
                raise RecordingError(
                    f"--holdout {holdout}: {name} holds {len(part)} partitions of the "
                    f"{len(self)} recorded; each part needs {MIN_PARTITIONS} at least "
                    "(change --holdout, or widen the window)"
                )
        return tune, held

    def replay(self, seed: int = 0) -> Replay:
        """The partitions as the simulator runs them: jobs in the order they arrived, from
        time 0. Seed 0 replays each partition's durations as recorded; seed k > 0 draws each
        job's (synthesis, GPU) pairs again from that job's (with replacement): a job of slow
        or large partitions stays one."""
        arrival = self.arrival_s
        if self.origin_s is not None:
            arrival = np.maximum(arrival, self.origin_s)
        arrival = arrival - float(np.min(arrival))
        order = np.lexsort((np.arange(len(self)), self.job, arrival))
        arrivals, sizes = [], []
        last: tuple[float, int] | None = None
        for at, job in zip(arrival[order].tolist(), self.job[order].tolist(), strict=True):
            if (at, job) != last:
                arrivals.append(float(at))
                sizes.append(0)
                last = (at, job)
            sizes[-1] += 1
        if seed > 0:  # each job's partitions drawn again from that job's own
            rng = np.random.default_rng(seed)
            starts = np.repeat(np.cumsum([0, *sizes[:-1]]), sizes)
            order = order[starts + (rng.random(len(self)) * np.repeat(sizes, sizes)).astype(int)]
        syn, gpu = self.synthesis_s[order], self.gpu_s[order]
        checks = None if self.verify_s is None else self.verify_s[order]
        return Replay(tuple(arrivals), tuple(sizes), np.maximum(syn, FLOOR_S),
                      np.maximum(gpu, FLOOR_S), checks)  # fmt: skip


def clock_text(at: float) -> str:
    """Clock seconds as ``2026-12-01 10:00:00 UTC``."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def read_journal(path: Path, since: float | None = None, until: float | None = None) -> Recording:
    """The partitions the journal file at ``path`` holds as completed with their result
    committed from ``since`` until ``until`` (clock seconds; None: no bound). RecordingError
    when the file cannot be read or the window holds none."""
    try:
        db = timings.open_read_only(path)
    except JournalFileError as exc:
        raise RecordingError(str(exc)) from None
    try:
        rows = timings.completed(db, since, until)
        whole = timings.span(db) if not rows else None
    finally:
        db.close()
    if whole is not None:
        raise RecordingError(_empty_window(path, since, until, whole))
    ids: dict[str, int] = {}
    synthesis = np.array([r.synthesis_s for r in rows], dtype=float)
    wait = np.array([math.nan if r.synthesis_wait_s is None else r.synthesis_wait_s
                     for r in rows], dtype=float)  # fmt: skip
    wait = np.minimum(wait, synthesis)  # NaN stays NaN: not recorded
    checks = [r.verify_s for r in rows]
    return Recording(
        source=f"journal {path}",
        arrival_s=np.array([r.job_created_at for r in rows], dtype=float),
        end_s=np.array([r.completed_at for r in rows], dtype=float),
        job=np.array([ids.setdefault(r.job_id, len(ids)) for r in rows], dtype=np.int64),
        synthesis_s=synthesis - np.nan_to_num(wait),
        gpu_s=np.array([r.gpu_s for r in rows], dtype=float),
        origin_s=since,
        wait_s=wait,
        verify_s=None if all(c is None for c in checks) else
        np.array([c or 0.0 for c in checks], dtype=float),
    )  # fmt: skip


def _empty_window(
    path: Path, since: float | None, until: float | None, whole: timings.TimingSpan
) -> str:
    window = (f"from {'the start' if since is None else clock_text(since)} "
              f"until {'now' if until is None else clock_text(until)}")  # fmt: skip
    if whole.partitions == 0 or whole.first_at is None or whole.last_at is None:
        held = "it holds no completed partition"
    else:
        held = (f"it holds {whole.partitions} completed partitions, committed "
                f"{clock_text(whole.first_at)} to {clock_text(whole.last_at)}")  # fmt: skip
    return (f"journal {path}: no partition completed in the window (--since, --until, --last) "
            f"{window}; {held}")  # fmt: skip


def read_trace(path: Path) -> Recording:
    """The partitions of the CSV trace at ``path`` (the module's docstring lists the columns).
    RecordingError naming the line, the column and the rule for anything else."""
    try:
        with path.open(newline="", encoding="utf-8") as file:
            return _parse_trace(path, list(csv.reader(file)))
    except OSError as exc:
        raise RecordingError(f"trace {path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise RecordingError(f"trace {path}: not a CSV file: {exc}") from None


def _parse_trace(path: Path, rows: list[list[str]]) -> Recording:
    header = [name.strip() for name in rows[0]] if rows else []
    if not header:
        raise RecordingError(f"trace {path}: empty; its first line names the columns")
    for name in header:
        if name not in COLUMNS:
            raise RecordingError(
                f"trace {path}: unknown column {name!r}; the columns are {', '.join(COLUMNS)}"
            )
    twice = sorted({name for name in header if header.count(name) > 1})
    missing = [name for name in REQUIRED if name not in header]
    if twice or missing:
        problem = f"column {twice[0]!r} is named twice" if twice else (
            f"column {missing[0]!r} is missing (required: {', '.join(REQUIRED)})")  # fmt: skip
        raise RecordingError(f"trace {path}: {problem}")
    values: dict[str, list[object]] = {name: [] for name in header}
    lines: list[int] = []  # each partition's line in the file
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        lines.append(line)
        where = f"trace {path} line {line}"
        if len(row) != len(header):
            raise RecordingError(f"{where}: {len(row)} fields; the header names {len(header)}")
        for name, cell in zip(header, row, strict=True):
            values[name].append(_cell(where, name, cell.strip()))
    if not values["synthesis_s"]:
        raise RecordingError(f"trace {path}: no partitions; each line after the header is one")
    n = len(values["synthesis_s"])
    arrival = np.array(values.get("arrival_s", [0.0] * n), dtype=float)
    labels: dict[object, int] = {}
    jobs = values.get("job", [0] * n)
    order = np.arange(n, dtype=float)
    end = np.array(values["end_s"], dtype=float) if "end_s" in values else order
    by_end = np.argsort(end, kind="stable")
    raw_bytes = values.get("bytes")
    synthesis = np.array(values["synthesis_s"], dtype=float)
    wait = np.array(values.get("synthesis_wait_s", [0.0] * n), dtype=float)
    over = np.flatnonzero(wait > synthesis)
    if over.size:
        first = over[0]
        raise RecordingError(
            f"trace {path} line {lines[first]}: synthesis_wait_s must not exceed synthesis_s (it "
            f"is the part of it spent waiting for a worker), got {wait[first]:g} of "
            f"{synthesis[first]:g}"
        )
    recording = Recording(
        source=f"trace {path}",
        arrival_s=arrival,
        end_s=end,
        job=np.array([labels.setdefault(j, len(labels)) for j in jobs], dtype=np.int64),
        synthesis_s=synthesis - wait,
        gpu_s=np.array(values["gpu_s"], dtype=float),
        bytes=None if raw_bytes is None else np.array(raw_bytes, dtype=np.int64),
        timed="end_s" in values,
        wait_s=wait if "synthesis_wait_s" in values else None,
        dated=False,
        verify_s=np.array(values["verify_s"], dtype=float) if "verify_s" in values else None,
    )
    return recording._take(by_end, None)


def _cell(where: str, name: str, text: str) -> object:
    """The value of one cell of column ``name``; RecordingError naming it and the rule."""
    if name == "job":
        return text
    if name == "bytes":
        try:
            size = int(_BYTES.validate_python(text))
        except ValidationError:
            size = 0
        if size <= 0:
            raise RecordingError(
                f"{where}: bytes must be a size > 0 (bytes, or with a unit: 3GiB), got {text!r}"
            )
        return size
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    low = 0.0 if name in SECONDS else -math.inf
    if not math.isfinite(value) or value < low:
        rule = "a number of seconds >= 0" if name in SECONDS else "a finite number of seconds"
        raise RecordingError(f"{where}: {name} must be {rule}, got {text!r}")
    return value
