"""Proving on a real GPU: the prover's result equals the NumPy reference; phases are timed."""

from __future__ import annotations

import numpy as np
import pytest

from gpu.cuda.devices import device_count
from gpu.cuda.ntt import GPU_PHASES
from gpu.cuda.prover import GpuProver
from gpu.reference.digest import digest
from gpu.reference.ntt import compute_h
from gpu.reference.synthesis import synthesize
from gpu.reference.verification import verify


@pytest.fixture(scope="module")
def prover() -> GpuProver:
    if device_count() == 0:
        pytest.skip("no CUDA device")
    return GpuProver(device=0, log_n=12)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_gpu_proof_equals_the_reference_and_verifies(prover: GpuProver, seed: int) -> None:
    a, b, c = synthesize(seed, 7, 12)
    reference = compute_h(a, b, c)
    result = prover.prove(a, b, c, keep_h=True)
    assert result.h is not None
    assert np.array_equal(result.h, reference)
    assert result.digest == digest(reference)
    assert verify(a, b, c, result.h)
    assert tuple(result.phases_s) == GPU_PHASES
    assert all(seconds > 0 for seconds in result.phases_s.values())


@pytest.mark.gpu
def test_without_keep_h_only_the_digest_comes_back(prover: GpuProver) -> None:
    a, b, c = (v.astype(np.uint32) for v in synthesize(4, 0, 12))
    result = prover.prove(a, b, c)
    assert result.h is None
    assert result.digest == digest(compute_h(a, b, c))
