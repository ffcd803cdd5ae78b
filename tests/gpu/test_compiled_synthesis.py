"""Synthesis compiled by Numba against the NumPy path and Python's exact integers."""

from __future__ import annotations

import logging
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu import compiled_synthesis, ntt
from gpu.field import FIELD_NAMES, PrimeField, by_name
from gpu.goldilocks import GOLDILOCKS
from gpu.synthesis import ProcessSynthesizer
from pacer.workload import NttWorkload, PartitionSpec, WorkloadError, synthesis_kernel
from tests.gpu.test_field import GOLDILOCKS_CARRIES

FIELDS = [by_name(name) for name in FIELD_NAMES]
each_field = pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)


def outputs(field: PrimeField, log_n: int, dtype: np.dtype | None = None) -> list[np.ndarray]:
    return [np.full(1 << log_n, 3, dtype=dtype or field.storage) for _ in range(3)]


@each_field
@pytest.mark.parametrize("uint64", [False, True], ids=["storage", "uint64"])
# 0 and 1: a lone element and a pair; 19 spans the NumPy path's steps of 2^18.
@pytest.mark.parametrize("log_n", [0, 1, 2, 3, 7, 12, 19], ids=lambda n: f"2^{n}")
def test_compiled_synthesis_writes_what_numpy_writes(
    field: PrimeField, uint64: bool, log_n: int
) -> None:
    dtype = np.dtype(np.uint64) if uint64 else field.storage
    for seed, index in [(0, 0), (7, 3), (2**63 - 1, 10**9)]:
        expected, compiled = outputs(field, log_n, dtype), outputs(field, log_n, dtype)
        ntt.synthesize_into(seed, index, expected, field=field)
        ntt.synthesize_into(seed, index, compiled, field=field, kernel="numba")
        for name, want, got in zip("abc", expected, compiled, strict=True):
            assert (want == got).all(), f"{field.name} 2^{log_n} ({seed}, {index}): {name} differs"


@each_field
def test_compiled_synthesis_satisfies_the_circuit(field: PrimeField) -> None:
    a, b, c = ntt.synthesize(5, 1, 10, field=field, kernel="numba")
    assert (b == np.roll(a, -1)).all()
    assert (field.mul(a, b) == c).all()
    assert int(a.max()) < field.P
    other = ntt.synthesize(5, 2, 10, field=field, kernel="numba")[0]
    assert not (a == other).all()  # another partition, other draws


@pytest.mark.parametrize(("a", "b"), GOLDILOCKS_CARRIES, ids=str)
def test_compiled_goldilocks_products_at_the_carries(a: int, b: int) -> None:
    p = GOLDILOCKS.P
    window = np.array([a % p, b % p, a % p], dtype=np.uint64)
    out = np.zeros(2, dtype=np.uint64)
    compiled_synthesis.consecutive_products(window, out, GOLDILOCKS)
    assert out.tolist() == [a % p * (b % p) % p] * 2


@each_field
@settings(max_examples=60, deadline=None)
@given(x=st.lists(st.integers(-8, 2**64 - 1), min_size=2, max_size=40))
def test_compiled_products_match_python_integers(field: PrimeField, x: list[int]) -> None:
    values = [v % field.P for v in x]
    window = np.array(values, dtype=np.uint64)
    for dtype in (field.storage, np.uint64):
        out = np.zeros(len(values) - 1, dtype=dtype)
        compiled_synthesis.consecutive_products(window, out, field)
        assert out.tolist() == [i * j % field.P for i, j in pairwise(values)]


def test_an_unknown_kernel_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"kernel must be one of numpy, numba, got 'fast'"):
        ntt.synthesize(1, 0, 4, kernel="fast")
    with pytest.raises(ValueError, match="kernel must be one of"):
        ProcessSynthesizer(1, kernel="fast")


def test_without_numba_the_kernel_is_refused_or_falls_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(compiled_synthesis, "available", lambda: False)
    with pytest.raises(RuntimeError, match="needs Numba"):
        ntt.synthesize(1, 0, 4, kernel="numba")
    with pytest.raises(WorkloadError, match=r"PACER_SYNTHESIS__KERNEL=numba: Numba is not"):
        NttWorkload(8, kernel="numba")
    with caplog.at_level(logging.INFO, logger="pacer.workload"):
        assert synthesis_kernel("auto", "goldilocks") == "numpy"
        assert synthesis_kernel("auto", "babybear") == "numpy"
    levels = [(r.levelname, r.getMessage().split(":")[1].split(" (")[0]) for r in caplog.records]
    assert levels == [
        (
            "WARNING",
            " goldilocks synthesis runs as NumPy calls, at less than half the compiled rate",
        ),
        ("INFO", " babybear synthesis runs as NumPy calls"),
    ]
    assert synthesis_kernel("numpy") == "numpy"


def test_auto_takes_numba_where_it_is_installed(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="pacer.workload"):
        workload = NttWorkload(8, "goldilocks", kernel="auto")
    assert workload.kernel == "numba"
    assert "synthesis compiled by Numba" in caplog.text
    a, b, c = workload.synthesize(PartitionSpec("job", 2, 9, {}))
    expected = ntt.synthesize(9, 2, 8, field=GOLDILOCKS)
    assert all((x == y).all() for x, y in zip((a, b, c), expected, strict=True))
    with pytest.raises(WorkloadError, match="PACER_SYNTHESIS__KERNEL=fast: must be auto"):
        synthesis_kernel("fast")


def test_without_a_writable_cache_the_kernels_compile_anyway(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from numba.core import config

    # A locator that finds no place (it serves only IPython cells): as with no writable
    # directory, Numba refuses to cache.
    monkeypatch.setattr(config, "CACHE_LOCATOR_CLASSES", "_IPythonCacheLocator")
    compiled_synthesis._kernels.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="gpu.compiled_synthesis"):
            compiled = ntt.synthesize(4, 1, 6, field=GOLDILOCKS, kernel="numba")
        assert "compile without a disk cache" in caplog.text
        expected = ntt.synthesize(4, 1, 6, field=GOLDILOCKS)
        assert all((x == y).all() for x, y in zip(compiled, expected, strict=True))
    finally:
        compiled_synthesis._kernels.cache_clear()
