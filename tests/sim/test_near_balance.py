"""Hosts whose synthesis slots barely outpace the GPUs, on heavy tails (D192, D194)."""

from __future__ import annotations

import pytest

from bench.near_balance import host
from pacer.config import ControllerSettings, Settings
from pacer.sim.suite import BUSY_VS_BEST_BASELINE, run_policy

SLOW = pytest.mark.slow


def busy(
    sigma: float, headroom: float, k: int, executor: bool, policy: str, **controller: float
) -> float:
    settings = Settings(controller=ControllerSettings(**controller))
    return run_policy(host(sigma, headroom, k, executor), policy, settings)[1].gpu_busy_ratio


@pytest.mark.parametrize(
    ("sigma", "headroom", "k", "executor", "behind"),
    [
        pytest.param(1.0, 1.1, 0, False, BUSY_VS_BEST_BASELINE, marks=SLOW),
        pytest.param(1.0, 1.1, 1, False, BUSY_VS_BEST_BASELINE, marks=SLOW),
        pytest.param(1.0, 1.05, 0, False, 0.008, marks=SLOW),
        pytest.param(1.3, 1.05, 1, False, 0.008, marks=SLOW),
        # Synthesis processes with a queue in front: T̂syn holds the queue's wait (D194).
        pytest.param(1.3, 1.1, 0, True, BUSY_VS_BEST_BASELINE, marks=SLOW),
        pytest.param(1.0, 1.05, 0, True, 0.008, marks=SLOW),
    ],
    ids=[
        "sigma-1-1.1x",
        "sigma-1-1.1x-seed-1",
        "sigma-1-1.05x",
        "sigma-1.3-1.05x-seed-1",
        "processes-sigma-1.3-1.1x",
        "processes-sigma-1-1.05x",
    ],
)
def test_near_balance_pi_keeps_the_gpus_nearly_as_busy_as_unpaced(
    sigma: float, headroom: float, k: int, executor: bool, behind: float
) -> None:
    unpaced = busy(sigma, headroom, k, executor, "unpaced")
    pi = busy(sigma, headroom, k, executor, "pi")
    without = busy(sigma, headroom, k, executor, "pi", near_balance_idle=0.0)
    # Within the suite's 0.005 of unpaced; at 1.05x a little more (bench/RESULTS.md, "hosts
    # whose synthesis barely outpaces the GPUs").
    assert pi >= unpaced - behind
    # The buffer is what does it: without it the GPUs idle far more.
    assert pi >= without + BUSY_VS_BEST_BASELINE
