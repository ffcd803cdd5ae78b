"""Busy time and idle gaps per GPU, on a virtual clock: a GPU is busy while any worker proves."""

from __future__ import annotations

import pytest

from pacer.pipeline import BusyMeter, GpuBusy


def test_a_gpu_is_busy_while_any_of_its_workers_proves() -> None:
    now = [0.0]
    gpu = GpuBusy(0, BusyMeter(lambda: now[0]))
    assert gpu.begin(1.0) is None  # the first partition ends no gap
    assert gpu.begin(1.5) is None  # a second worker joins: still busy, no gap
    gpu.end(2.0)
    gpu.end(3.0)  # busy 1.0 .. 3.0
    assert gpu.begin(3.25) == pytest.approx(0.25)  # idle from the last end to this start
    gpu.end(4.0)
    now[0] = 4.0
    assert gpu.busy_seconds() == pytest.approx(2.0 + 0.75)
    assert gpu.ratio() == pytest.approx(2.75 / 4.0)


def test_busy_ratio_counts_a_partition_still_running() -> None:
    now = [0.0]
    gpu = GpuBusy(1, BusyMeter(lambda: now[0]))
    gpu.begin(0.0)
    now[0] = 10.0
    assert gpu.ratio() == pytest.approx(1.0)
    assert gpu.busy_seconds() == pytest.approx(10.0)


def test_the_idle_gap_so_far_is_none_before_work_and_zero_while_busy() -> None:
    now = [0.0]
    gpu = GpuBusy(0, BusyMeter(lambda: now[0]))
    assert gpu.idle_s() is None  # never proved: no gap yet
    gpu.begin(1.0)
    now[0] = 2.0
    assert gpu.idle_s() == 0.0
    gpu.end(2.5)
    now[0] = 4.0
    assert gpu.idle_s() == pytest.approx(1.5)  # idle since the end at 2.5
