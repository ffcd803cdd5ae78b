"""What packing completed jobs saves in the fleet's database: rows and bytes of the results of
``--jobs`` completed jobs of ``--partitions`` each, as partition rows and once packed.

    .venv/bin/python -m bench.journal_packs [--jobs 20] [--partitions 2000] [--markdown]

A fresh database on a PostgreSQL of its own (Debian's package). Each result as a host commits
it: a SHA-256 hex digest, four timed phases, its GPU. Bytes are ``pg_total_relation_size``
(table, TOAST and indexes) of ``partitions`` and ``partition_packs``, after ``VACUUM FULL``
each time (the space of deleted rows, which new rows reuse, is not counted). Also the time
``pacer_pack`` took per job, and a check that every page of every job answers as before.
"""

from __future__ import annotations

import argparse
import hashlib
import time

import psycopg

from pacer.journal import PartitionResult
from pacer.pgjournal import PgJournal
from tests.postgres_server import PostgresServer

COMMIT_BATCH = 256
PHASES = ("h2d", "ntt", "msm", "d2h")
TABLES = ("partitions", "partition_packs")


def result(job_id: str, index: int) -> PartitionResult:
    """A result as a host commits one: a hex digest, timed phases, a GPU."""
    digest = hashlib.sha256(f"{job_id}/{index}".encode()).hexdigest()
    phases = {name: 0.1 + 0.013 * ((index * 7 + k) % 50) for k, name in enumerate(PHASES)}
    return PartitionResult(job_id, index, digest, synthesis_s=1.5 + (index % 17) * 0.01,
                           gpu_s=0.3 + (index % 13) * 0.01, phases=phases,
                           gpu=index % 8)  # fmt: skip


def measure(url: str) -> list[tuple[str, int, int]]:
    """Per table: rows and bytes, after VACUUM FULL."""
    found = []
    with psycopg.connect(url, autocommit=True) as conn:
        for table in TABLES:
            conn.execute(f"VACUUM FULL {table}")
            row = conn.execute(
                f"SELECT count(*), pg_total_relation_size('{table}') FROM {table}"
            ).fetchone()
            assert row is not None
            found.append((table, int(row[0]), int(row[1])))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20, help="completed jobs (default 20)")
    parser.add_argument("--partitions", type=int, default=2000,
                        help="partitions a job (default 2000)")  # fmt: skip
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = parser.parse_args()
    server = PostgresServer()
    server.start()
    try:
        url = server.create_database()
        with PgJournal.connect(url, host="bench-packs") as journal:
            jobs = [journal.add_job(args.partitions, None, {}) for _ in range(args.jobs)]
            for job in jobs:
                for first in range(0, args.partitions, COMMIT_BATCH):
                    last = min(first + COMMIT_BATCH, args.partitions)
                    journal.complete_partitions(result(job.id, i) for i in range(first, last))
            pages = [journal.partitions(job.id) for job in jobs]
            before = measure(url)
            began = time.perf_counter()
            packed = 0
            while (more := journal.pack()) > 0:
                packed += more
            pack_s = time.perf_counter() - began
            assert packed == len(jobs), f"packed {packed} of {len(jobs)} jobs"
            same = [journal.partitions(job.id) for job in jobs] == pages
            after = measure(url)
    finally:
        server.stop()
    total = args.jobs * args.partitions
    rows = [("rows", before), ("packed", after)]
    header = ("form", "partitions rows", "partitions bytes", "partition_packs rows",
              "partition_packs bytes", "bytes a partition")  # fmt: skip
    lines = []
    for name, found in rows:
        (_, p_rows, p_bytes), (_, k_rows, k_bytes) = found
        lines.append((name, f"{p_rows:,}", f"{p_bytes:,}", f"{k_rows:,}", f"{k_bytes:,}",
                      f"{(p_bytes + k_bytes) / total:.0f}"))  # fmt: skip
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|")
        for line in lines:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
        print("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
        for line in lines:
            print("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)))
    print(f"\n{args.jobs} jobs of {args.partitions} partitions ({total:,} results);"
          f" pacer_pack {1000 * pack_s / args.jobs:.1f} ms a job;"
          f" every page as before: {'yes' if same else 'NO'}")  # fmt: skip


if __name__ == "__main__":
    main()
