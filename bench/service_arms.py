"""pi against unpaced on the real service where synthesis bounds, with durations known.

    .venv/bin/python -m bench.service_arms [--slots 4] [--rounds 3] [--jobs 20]
                                           [--partitions 30] [--markdown]

Each run is the real service (`pacer run`, a child process with its own journal) on
`bench.tune_fidelity`'s workload, whose synthesis and proofs sleep for durations drawn from
each partition's job seed and index; every job has the seed ``SEED``, so every run proves the
same partitions in the same times, and two runs differ only by the policy and the machine's
noise. With ``--slots`` synthesis
workers (4: about 9 syntheses a second against the GPUs' 33) synthesis bounds throughput, and
what matters is that no worker waits for a dispatch. The arms run in turn, A B B A A B ...
(each round starts with the arm the last one ended on), ``--rounds`` times.

Per run: partitions a second from the first job's acceptance to the last commit, the synthesis
workers' use (their sleeping seconds over workers × that time), the mean wait for a worker
(the journal's ``synthesis_wait`` phase), and the mean memory in flight (partitions) while work
was outstanding, from the service's own ``pacer_memory_inflight_bytes`` scraped over HTTP every
0.2 s. Then pi ÷ unpaced − 1 by round, with its mean and 95 % interval.
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from bench.stats import interval
from bench.tune_fidelity import PARTITION_BYTES, run_span, service_run
from bench.usage import doc_parser
from pacer.cli.table import render
from pacer.sim.recording import read_journal

SCRAPE_S = 0.2
SEED = 7  # every job's seed: each run proves the same partitions, in the same times


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, float]:
    """The service's gauges by name (the first sample of each), or {} while it is not up."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as reply:
            text = reply.read().decode()
    except OSError:
        return {}
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values.setdefault(name.split("{")[0], float(value))
    return values


def run(slots: int, policy: str, jobs: int, partitions: int, journal: Path) -> dict[str, float]:
    """One run of the service; its measures."""
    port = free_port()
    command, env = service_run(slots, policy, jobs, partitions, journal)
    command += ["--param", f"seed={SEED}", "--port", str(port)]
    held: list[float] = []
    with subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL) as child:
        while child.poll() is None:
            gauges = scrape(port)
            inflight = gauges.get("pacer_memory_inflight_bytes", 0.0)
            if gauges.get("pacer_backlog_partitions", 0) > 0 or inflight > 0:
                held.append(inflight / PARTITION_BYTES)
            time.sleep(SCRAPE_S)
        if child.returncode != 0:
            raise RuntimeError(f"pacer run exited with {child.returncode}")
    recording = read_journal(journal)
    span = run_span(recording)
    assert recording.wait_s is not None  # the service journals each partition's wait
    return {
        "rate": len(recording) / span,
        "use": float(np.sum(recording.synthesis_s)) / (slots * span),
        "wait": float(np.mean(recording.wait_s)),
        "held": statistics.fmean(held) if held else 0.0,
    }


def main() -> int:
    parser = doc_parser(__doc__)
    parser.add_argument("--slots", type=int, default=4, help="synthesis workers")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=30)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"pi": [], "unpaced": []}
    order = ["pi", "unpaced"]
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for policy in order:
                path = Path(tmp) / f"{round_}-{policy}.sqlite"
                results[policy].append(run(args.slots, policy, args.jobs, args.partitions, path))
                print(f"round {round_} {policy}: {results[policy][-1]}", file=sys.stderr)
            order.reverse()
    rows = []
    for policy, runs in results.items():
        cells = []
        for key, digits in (("rate", 2), ("use", 3), ("wait", 3), ("held", 1)):
            mean, half = interval([r[key] for r in runs])
            cells.append(f"{mean:.{digits}f} ± {half:.{digits}f}")
        rows.append((policy, str(len(runs)), *cells))
    print(render(("policy", "runs", "partitions/s", "workers' use", "wait s", "in flight"),
                 rows, markdown=args.markdown))  # fmt: skip
    shares = [p["rate"] / u["rate"] - 1 for p, u in zip(results["pi"], results["unpaced"],
                                                         strict=True)]  # fmt: skip
    mean, half = interval(shares)
    uses = [p["use"] / u["use"] - 1 for p, u in zip(results["pi"], results["unpaced"],
                                                     strict=True)]  # fmt: skip
    use_mean, use_half = interval(uses)
    memory = [p["held"] / u["held"] for p, u in zip(results["pi"], results["unpaced"],
                                                     strict=True) if u["held"] > 0]  # fmt: skip
    print(f"\npi ÷ unpaced − 1 by round, partitions/s: "
          f"{', '.join(f'{100 * x:+.2f}' for x in shares)} % (mean {100 * mean:+.2f} ± "
          f"{100 * half:.2f} %); workers' use: {', '.join(f'{100 * x:+.2f}' for x in uses)} % "
          f"(mean {100 * use_mean:+.2f} ± {100 * use_half:.2f} %); pi's memory in flight ÷ "
          f"unpaced's {statistics.fmean(memory):.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
