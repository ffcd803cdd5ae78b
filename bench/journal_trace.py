"""A journal's completed partitions as a CSV trace for `pacer tune --trace`, to keep or share.

    .venv/bin/python -m bench.journal_trace JOURNAL.sqlite --out FILE.csv [--bytes 3GiB]

Writes one row per partition completed with its result committed, in the order `pacer tune
--journal` reads them (`pacer.journal.timings.completed`): its job (``j0``, ``j1``, ... in the
order the jobs first appear), its job's acceptance and its commit as ``arrival_s`` and
``end_s`` (seconds from the first job's acceptance), its synthesis seconds, the part of them
it waited for a synthesis worker, its GPU seconds, ``--bytes``, and the seconds its proof took
to check on the CPU. Where the journal kept no partition's wait, or no check, that column is
left out; where it kept some, the others are written as 0 (a replay takes such a synthesis as
recorded either way, and a partition not checked as 0 s of checking).
Numbers are written in full (``repr``), so a replay of the trace is the replay of the journal:
`pacer tune --trace` on the file prints what `pacer tune --journal` prints on the journal,
but for the lines that name the recording.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.usage import doc_parser
from pacer.journal import timings
from pacer.journal.timings import PartitionTiming

COLUMNS = ("job", "arrival_s", "synthesis_s", "synthesis_wait_s", "gpu_s", "end_s", "bytes",
           "verify_s")  # fmt: skip


def trace(rows: Sequence[PartitionTiming], size: str) -> str:
    """The CSV text of ``rows``, each holding ``size`` bytes (as written: ``3GiB``).

    >>> row = PartitionTiming("a1", 100.0, 0, 2.5, 0.25, 0.2, 103.0)
    >>> print(trace([row], "3GiB"), end="")
    job,arrival_s,synthesis_s,synthesis_wait_s,gpu_s,end_s,bytes
    j0,0.0,2.5,0.25,0.2,3.0,3GiB
    >>> print(trace([row._replace(synthesis_wait_s=None)], "3GiB"), end="")
    job,arrival_s,synthesis_s,gpu_s,end_s,bytes
    j0,0.0,2.5,0.2,3.0,3GiB
    >>> print(trace([row, row._replace(partition=1, verify_s=0.75)], "3GiB"), end="")
    job,arrival_s,synthesis_s,synthesis_wait_s,gpu_s,end_s,bytes,verify_s
    j0,0.0,2.5,0.25,0.2,3.0,3GiB,0.0
    j0,0.0,2.5,0.25,0.2,3.0,3GiB,0.75
    """
    origin = min((r.job_created_at for r in rows), default=0.0)
    waits = any(r.synthesis_wait_s is not None for r in rows)
    checks = any(r.verify_s is not None for r in rows)
    left_out = {"synthesis_wait_s": not waits, "verify_s": not checks}
    jobs: dict[str, int] = {}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([c for c in COLUMNS if not left_out.get(c)])
    for r in rows:
        job = jobs.setdefault(r.job_id, len(jobs))
        wait = [repr(r.synthesis_wait_s or 0.0)] if waits else []
        check = [repr(r.verify_s or 0.0)] if checks else []
        writer.writerow([f"j{job}", repr(r.job_created_at - origin), repr(r.synthesis_s), *wait,
                         repr(r.gpu_s), repr(r.completed_at - origin), size, *check])  # fmt: skip
    return out.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    parser = doc_parser(__doc__)
    parser.add_argument("journal", type=Path, help="a pacer journal file (SQLite)")
    parser.add_argument("--out", type=Path, required=True, help="the CSV file to write")
    parser.add_argument("--bytes", default="3GiB", help="what each partition held (3GiB)")
    args = parser.parse_args(argv)
    db = timings.open_read_only(args.journal)
    try:
        rows = timings.completed(db)
    finally:
        db.close()
    if not rows:
        parser.error(f"{args.journal}: no completed partition to write")
    args.out.write_text(trace(rows, args.bytes))
    print(f"{len(rows)} partitions written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
