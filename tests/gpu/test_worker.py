"""Proving on a real GPU: the worker's result equals the NumPy reference; phases are timed."""

from __future__ import annotations

import numpy as np
import pytest

import gpu.ntt as ntt
from gpu import worker


@pytest.fixture(scope="module")
def prover() -> worker.GpuProver:
    if worker.device_count() == 0:
        pytest.skip("no CUDA device")
    return worker.GpuProver(device=0, log_n=12)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_gpu_proof_equals_the_reference_and_verifies(prover: worker.GpuProver, seed: int) -> None:
    a, b, c = ntt.synthesize(seed, 7, 12)
    reference = ntt.compute_h(a, b, c)
    result = prover.prove(a, b, c, keep_h=True)
    assert result.h is not None
    assert np.array_equal(result.h, reference)
    assert result.digest == ntt.digest(reference)
    assert ntt.verify(a, b, c, result.h)
    assert tuple(result.phases_s) == worker.PHASES
    assert all(seconds > 0 for seconds in result.phases_s.values())


@pytest.mark.gpu
def test_without_keep_h_only_the_digest_comes_back(prover: worker.GpuProver) -> None:
    a, b, c = (v.astype(np.uint32) for v in ntt.synthesize(4, 0, 12))
    result = prover.prove(a, b, c)
    assert result.h is None
    assert result.digest == ntt.digest(ntt.compute_h(a, b, c))


def test_no_device_without_cupy() -> None:
    try:
        import cupy  # noqa: F401
    except ImportError:
        assert worker.device_count() == 0
