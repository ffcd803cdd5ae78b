"""How closely a recorded run's replay keeps the run's pace, with the CPU checks and without.

    .venv/bin/python -m bench.replay_pace RECORDING... [--policy pi] [--workers 2] [--cores 16]
                                          [--budget 96GiB] [--partition-bytes 3GiB]
                                          [--verify-threads 1] [--markdown]

Each RECORDING is a journal file (``.sqlite``) or a CSV trace (`bench.journal_trace` writes
one from a journal). For each, prints the run's pace (partitions a second from the first job's
acceptance to the last commit) and that of its replay once as recorded (seed 0) under
``--policy``, as `pacer tune` replays it: with the partitions the run checked on the CPU
holding their memory until checked, on ``--verify-threads`` threads (0: on the synthesis
workers), and with the checks left out. The host flags give the host the run was recorded on.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from pydantic import ByteSize, TypeAdapter

from bench.tune_fidelity import replay_rate, run_span
from bench.usage import doc_parser
from pacer.cli.table import render
from pacer.sim.recording import Recording, read_journal, read_trace
from pacer.sim.replay import HostShape

_BYTES = TypeAdapter(ByteSize)


def read(path: Path) -> Recording:
    """The recording at ``path``: a journal where it ends in ``.sqlite``, else a trace."""
    return read_journal(path) if path.suffix == ".sqlite" else read_trace(path)


def row(name: str, recording: Recording, host: HostShape, policy: str) -> tuple[str, ...]:
    """The run's pace and the two replays' (partitions a second), for the table."""
    run = len(recording) / run_span(recording)
    checked = replay_rate(recording, host, policy, queued=True)
    plain = replay_rate(replace(recording, verify_s=None), host, policy, queued=True)
    return (name, str(len(recording)), str(recording.checks), f"{run:.2f}",
            f"{checked:.2f} ({checked / run - 1:+.1%})",
            f"{plain:.2f} ({plain / run - 1:+.1%})")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = doc_parser(__doc__)
    parser.add_argument("recordings", nargs="+", type=Path, metavar="RECORDING")
    parser.add_argument("--policy", default="pi")
    parser.add_argument("--workers", type=int, default=2, help="GPU workers")
    parser.add_argument("--cores", type=int, default=16, help="synthesis processes")
    parser.add_argument("--budget", default="96GiB")
    parser.add_argument("--partition-bytes", default="3GiB")
    parser.add_argument("--verify-threads", type=int, default=1)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    host = HostShape(args.workers, args.cores, 1, int(_BYTES.validate_python(args.budget)),
                     int(_BYTES.validate_python(args.partition_bytes)),
                     args.verify_threads)  # fmt: skip
    rows = [row(path.name, read(path), host, args.policy) for path in args.recordings]
    headers = ("recording", "partitions", "checked", "run /s", "replay /s, with the checks",
               "replay /s, checks left out")  # fmt: skip
    print(render(headers, rows, markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
