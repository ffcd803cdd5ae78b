"""How closely `pacer tune`'s replay of a journal matches the run that wrote it.

    .venv/bin/python -m bench.tune_fidelity [--slots 4,16] [--policies pi,unpaced]
                                            [--jobs 20] [--partitions 30] [--verify-every N]
                                            [--markdown]

For each number of synthesis workers (``--slots``) and each policy, runs the real service
(`pacer run`, a child process with its own journal) on a workload that sleeps: a synthesis
lognormal around ``SYNTHESIS_MEDIAN_S`` (sigma ``SYNTHESIS_SIGMA``), a proof around
``GPU_MEDIAN_S`` on each of ``WORKERS`` proving workers, so the host's speed is known and the
machine's two cores do not bound it. Then it reads the journal as `pacer tune` does and
replays it once, as recorded (seed 0), under the same policy on the same host shape, two ways:

- as `pacer tune` replays: synthesis less its journaled wait for a synthesis worker, on a
  host whose synthesis workers queue what is dispatched beyond them, as the service does;
- as it replayed before the wait was journaled: the whole dispatch-to-ready time as work,
  and every synthesis dispatched running at once, sharing the workers' cores.

With ``--verify-every N`` the service checks every N-th proof on the CPU
(``PACER_VERIFY_EVERY``), a check sleeping around ``VERIFY_MEDIAN_S`` on a synthesis worker
(this workload synthesizes in threads); the replay as `pacer tune` replays then checks the
partitions the journal says were checked, on the synthesis workers, and a third column
replays the same with the checks left out.

Prints, per run, the throughput (partitions a second from the first job's acceptance to the
last commit) of the run and of each replay, and the mean wait for a worker the run recorded.
With 4 workers synthesis bounds throughput (about 9 a second against the GPUs' 33); with 16
the two are near balance.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.usage import doc_parser
from pacer.cli.table import render
from pacer.config import ControllerSettings, Settings
from pacer.sim.engine import Simulation
from pacer.sim.policies import policy_factory
from pacer.sim.recording import Recording, read_journal
from pacer.sim.replay import HostShape, scenario_for
from pacer.sim.report import summarize
from pacer.workload import PartitionSpec, Proof, Workload, check_known

SYNTHESIS_MEDIAN_S, SYNTHESIS_SIGMA = 0.4, 0.5
GPU_MEDIAN_S, GPU_SIGMA = 0.06, 0.1
VERIFY_MEDIAN_S, VERIFY_SIGMA = 0.3, 0.2
WORKERS = 2
PARTITION_BYTES = 1 << 20
BUDGET_PARTITIONS = 96


def _draw(spec: PartitionSpec, salt: int, median: float, sigma: float) -> float:
    """A lognormal duration (s), the same for the same partition."""
    rng = np.random.default_rng([spec.seed, spec.index, salt])
    return median * math.exp(sigma * rng.standard_normal())


class Sleeping(Workload):
    """Synthesis and proving that sleep for known, seeded durations (s)."""

    name = "sleeping"
    threads_per_synthesis = 1
    verify_every = 0

    @property
    def workers(self) -> int | None:
        return WORKERS

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return check_known(params, ("seed",))

    def partition_bytes(self, params: Mapping[str, Any]) -> int:
        return PARTITION_BYTES

    def synthesize(self, spec: PartitionSpec) -> Any:
        time.sleep(_draw(spec, 0, SYNTHESIS_MEDIAN_S, SYNTHESIS_SIGMA))
        return spec

    def prove(self, buffers: Any, worker: int, keep_output: bool = True) -> Proof:
        seconds = _draw(buffers, 1, GPU_MEDIAN_S, GPU_SIGMA)
        time.sleep(seconds)
        return Proof(f"p{buffers.seed}-{buffers.index}", {"sleep": seconds})

    def verify(self, spec: PartitionSpec, buffers: Any, proof: Proof) -> bool:
        time.sleep(_draw(spec, 2, VERIFY_MEDIAN_S, VERIFY_SIGMA))
        return proof.digest == f"p{spec.seed}-{spec.index}"


def workload(settings: Settings) -> Workload:
    """The factory ``PACER_WORKLOAD=bench.tune_fidelity:workload`` names."""
    return Sleeping()


def service_run(
    slots: int, policy: str, jobs: int, partitions: int, journal: Path, verify_every: int = 0
) -> tuple[list[str], dict[str, str]]:
    """The command and environment of one `pacer run` of this workload: ``jobs`` jobs of
    ``partitions`` on ``slots`` synthesis workers under ``policy``, every ``verify_every``-th
    proof checked (0: none), journaled to ``journal``."""
    env = {
        "PACER_VERIFY_EVERY": str(verify_every),
        **os.environ,
        "PACER_WORKLOAD": "bench.tune_fidelity:workload",
        "PACER_CONTROLLER__POLICY": policy,
        "PACER_SYNTHESIS__CORES": str(slots),
        "PACER_SYNTHESIS__THREADS_PER_SYNTHESIS": "1",
        "PACER_MEMORY__BUDGET_BYTES": str(BUDGET_PARTITIONS * PARTITION_BYTES),
        "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "pacer", "run", "--jobs", str(jobs), "--partitions",
               str(partitions), "--journal", str(journal)]  # fmt: skip
    return command, env


def record(
    slots: int, policy: str, jobs: int, partitions: int, journal: Path, verify_every: int
) -> None:
    """Run the service once (`service_run`)."""
    command, env = service_run(slots, policy, jobs, partitions, journal, verify_every)
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)


def run_span(recording: Recording) -> float:
    """Seconds from the first job's acceptance to the last commit of a run's journal."""
    return float(np.max(recording.end_s) - np.min(recording.arrival_s))


def replay_rate(recording: Recording, host: HostShape, policy: str, *, queued: bool) -> float:
    """The replay's partitions a second while work was outstanding (seed 0, as recorded)."""
    replay = recording.replay(0)
    scenario = scenario_for(replay, host)
    if not queued:
        synthesis = scenario.synthesis.model_copy(update={"executor": None})
        scenario = scenario.model_copy(update={"synthesis": synthesis})
    settings = Settings(controller=ControllerSettings(policy=policy))
    factory = policy_factory(policy, scenario, settings)
    report = summarize(Simulation(scenario, policy, factory, replay).run())
    return report.throughput_partitions_per_s


def main() -> int:
    parser = doc_parser(__doc__)
    parser.add_argument("--slots", default="4,16", help="synthesis workers, per run")
    parser.add_argument("--policies", default="pi,unpaced")
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=30)
    parser.add_argument("--verify-every", type=int, default=0, help="check every N-th proof")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for slots in (int(s) for s in args.slots.split(",")):
            host = HostShape(WORKERS, slots, 1, BUDGET_PARTITIONS * PARTITION_BYTES,
                             PARTITION_BYTES, verify_threads=0)  # fmt: skip
            for policy in args.policies.split(","):
                path = Path(tmp) / f"{slots}-{policy}.sqlite"
                record(slots, policy, args.jobs, args.partitions, path, args.verify_every)
                tuned = read_journal(path)
                done = len(tuned)
                actual = done / run_span(tuned)
                assert tuned.wait_s is not None
                whole = replace(
                    tuned,
                    synthesis_s=tuned.synthesis_s + np.nan_to_num(tuned.wait_s),
                    verify_s=None,
                )
                now = replay_rate(tuned, host, policy, queued=True)
                before = replay_rate(whole, host, policy, queued=False)
                unchecked = replay_rate(replace(tuned, verify_s=None), host, policy, queued=True)
                print(f"{slots} workers, {policy}: done", file=sys.stderr)
                wait = float(np.nanmean(tuned.wait_s))
                rows.append((str(slots), policy, str(done), str(tuned.checks), f"{wait:.3f}",
                             f"{actual:.2f}", f"{now:.2f} ({now / actual - 1:+.1%})",
                             f"{before:.2f} ({before / actual - 1:+.1%})",
                             f"{unchecked:.2f} ({unchecked / actual - 1:+.1%})"))  # fmt: skip
    headers = ("synthesis workers", "policy", "partitions", "checked", "mean wait s", "run /s",
               "replay /s, wait left out", "replay /s, wait as work",
               "replay /s, checks left out")  # fmt: skip
    print(render(headers, rows, markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
