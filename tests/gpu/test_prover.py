"""Proving on a real GPU: the prover's result equals the NumPy reference; phases are timed.
Building the provers: the kernels beside the host tables (no GPU needed)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from gpu import ntt_cuda
from gpu import prover as prover_module
from gpu.babybear import BABYBEAR
from gpu.devices import device_count
from gpu.digest import digest
from gpu.ntt import compute_h
from gpu.ntt_cuda import GPU_PHASES
from gpu.prover import GpuProver
from gpu.synthesis import synthesize
from gpu.verification import verify


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


def test_provers_compile_the_kernels_beside_the_host_tables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each device's context and kernels on a second thread while the host tables are built
    (no GPU: the device edges are fakes that wait for each other)."""
    both = threading.Barrier(2, timeout=10)  # broken unless the two run at once
    compiled: list[int] = []
    built: list[tuple[int, int]] = []

    def device_kernels(device: int, field: object) -> dict[str, object]:
        if not compiled:
            both.wait()
        compiled.append(device)
        return {}

    def host_tables(log_n: int, field: object) -> None:
        both.wait()

    class FakeProver:
        def __init__(self, device: int, log_n: int, field: object) -> None:
            built.append((device, log_n))

    monkeypatch.setattr(ntt_cuda, "device_kernels", device_kernels)
    monkeypatch.setattr(ntt_cuda, "host_tables", host_tables)
    monkeypatch.setattr(ntt_cuda, "release_host_tables", lambda: None)
    monkeypatch.setattr(prover_module, "GpuProver", FakeProver)
    provers = prover_module.build_provers([1, 0, 1], 10, BABYBEAR)
    assert sorted(compiled) == [0, 1]  # once a device
    assert built == [(1, 10), (0, 10), (1, 10)]
    assert sorted(provers) == [0, 1, 2]
