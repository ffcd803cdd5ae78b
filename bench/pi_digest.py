"""pi alone on every shipped scenario and ten seeds, one line each, to compare two trees.

    PYTHONPATH=<tree> python -m bench.pi_digest [--seeds 10] > digest.txt

Each line: the scenario, the seed set k (the scenario's seed + 101·k, as the suite's sweep),
and pi's busy ratio and mean in flight (every digit), peak in flight, partitions completed and
recoveries. Two trees whose lines are equal ran pi identically.
"""

from __future__ import annotations

import argparse
import sys

from pacer.config import Settings
from pacer.sim.scenario import load_scenario, shipped_scenarios
from pacer.sim.suite import run_policy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    settings = Settings()
    for path in shipped_scenarios():
        base = load_scenario(path)
        for k in range(args.seeds):
            sc = base.model_copy(update={"seed": base.seed + 101 * k}) if k else base
            _, r = run_policy(sc, "pi", settings)
            recoveries = [x.after_s for x in r.recoveries]
            print(f"{path.stem} {k} busy={r.gpu_busy_ratio!r} mean={r.mean_inflight_partitions!r} "
                  f"peak={r.peak_inflight_partitions} done={r.partitions_completed} "
                  f"rec={recoveries}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
