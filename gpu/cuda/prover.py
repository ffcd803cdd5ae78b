"""Proving one partition on a GPU: copy in from (pinned) host buffers, run the kernels, copy out.

Each ``GpuProver`` owns one device, one non-blocking stream and its buffers. So two provers on
one GPU overlap one partition's copies with another's kernels (docs/decisions/gpu.md, D102).
Phase times come from CUDA events between the phases (`gpu.cuda.ntt.GPU_PHASES`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu.cuda.ntt import GPU_PHASES, CudaHSteps
from gpu.field.babybear import BABYBEAR
from gpu.field.prime import PrimeField

__all__ = ["GpuProver", "GpuResult", "build_provers"]


@dataclass(frozen=True)
class GpuResult:
    """H's digest, its coefficients when kept, and each phase's time in seconds."""

    digest: str
    h: npt.NDArray[np.uint64] | None
    phases_s: dict[str, float]


class GpuProver:
    """The H computation for partitions of 2^``log_n`` elements of ``field`` on GPU ``device``."""

    def __init__(self, device: int, log_n: int, field: PrimeField = BABYBEAR) -> None:
        import cupy as cp

        self._cp = cp
        self.device = device
        self.log_n = log_n
        with cp.cuda.Device(device):
            self.stream = cp.cuda.Stream(non_blocking=True)
            self.steps = CudaHSteps(log_n, stream=self.stream, field=field)
            self._events = [cp.cuda.Event() for _ in range(len(GPU_PHASES) + 1)]

    def prove(
        self,
        a: npt.NDArray[Any],
        b: npt.NDArray[Any],
        c: npt.NDArray[Any],
        *,
        keep_h: bool = False,
    ) -> GpuResult:
        """H = (A·B − C) / Z for evaluations a, b, c on the domain; blocks until done.

        Returns H's digest, and H's coefficients too when ``keep_h``.
        """
        cp = self._cp
        events = self._events
        with cp.cuda.Device(self.device):
            events[0].record(self.stream)
            dev = self.steps.h2d(a, b, c)
            events[1].record(self.stream)
            coeffs = self.steps.intt(*dev)
            events[2].record(self.stream)
            evals = self.steps.coset_ntt(*coeffs)
            events[3].record(self.stream)
            quotient = self.steps.pointwise(*evals)
            events[4].record(self.stream)
            h_dev = self.steps.coset_intt(quotient)
            events[5].record(self.stream)
            h = self.steps.d2h(h_dev) if keep_h else None
            digest = self.steps.digest(h_dev)
            events[6].record(self.stream)
            events[6].synchronize()
            phases = {
                name: cp.cuda.get_elapsed_time(events[i], events[i + 1]) / 1000.0
                for i, name in enumerate(GPU_PHASES)
            }
        return GpuResult(digest, None if h is None else np.asarray(h, dtype=np.uint64), phases)


def build_provers(devices: list[int], log_n: int, field: PrimeField) -> dict[int, GpuProver]:
    """Make a prover for each worker on ``devices[worker]``.

    Each device's context, kernels and tables are made once and shared by its workers.
    """
    return {worker: GpuProver(device, log_n, field) for worker, device in enumerate(devices)}
