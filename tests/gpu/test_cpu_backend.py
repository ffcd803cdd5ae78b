"""Synthesis and verification compiled by Numba against the NumPy path and Python integers."""

from __future__ import annotations

import logging
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.field import FIELD_NAMES, by_name
from gpu.field.babybear import BABYBEAR
from gpu.field.goldilocks import GOLDILOCKS
from gpu.field.prime import PrimeField
from gpu.procs.executor import ProcessSynthesizer
from gpu.reference import cpu_backend, synthesis, verification
from gpu.reference.ntt import compute_h
from gpu.workload import NttWorkload, cpu_backend_for
from pacer.workload import PartitionSpec, WorkloadError
from tests.gpu.test_field import GOLDILOCKS_CARRIES

FIELDS = [by_name(name) for name in FIELD_NAMES]
each_field = pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)


def outputs(field: PrimeField, log_n: int, dtype: np.dtype | None = None) -> list[np.ndarray]:
    return [np.full(1 << log_n, 3, dtype=dtype or field.storage) for _ in range(3)]


@each_field
@pytest.mark.parametrize("uint64", [False, True], ids=["storage", "uint64"])
# 0 and 1: a lone element and a pair; 19 spans the NumPy path's steps of 2^18.
@pytest.mark.parametrize("log_n", [0, 1, 2, 3, 7, 12, 19], ids=lambda n: f"2^{n}")
def test_compiled_writes_what_numpy_writes(field: PrimeField, uint64: bool, log_n: int) -> None:
    dtype = np.dtype(np.uint64) if uint64 else field.storage
    for seed, index in [(0, 0), (7, 3), (2**63 - 1, 10**9)]:
        expected, fast = outputs(field, log_n, dtype), outputs(field, log_n, dtype)
        synthesis.synthesize_into(seed, index, expected, field=field)
        synthesis.synthesize_into(seed, index, fast, field=field, backend="numba")
        for name, want, got in zip("abc", expected, fast, strict=True):
            assert (want == got).all(), f"{field.name} 2^{log_n} ({seed}, {index}): {name} differs"


@each_field
def test_compiled_satisfies_the_circuit(field: PrimeField) -> None:
    a, b, c = synthesis.synthesize(5, 1, 10, field=field, backend="numba")
    assert (b == np.roll(a, -1)).all()
    assert (field.mul(a, b) == c).all()
    assert int(a.max()) < field.P
    other = synthesis.synthesize(5, 2, 10, field=field, backend="numba")[0]
    assert not (a == other).all()  # another partition, other draws


@pytest.mark.parametrize(("a", "b"), GOLDILOCKS_CARRIES, ids=str)
def test_compiled_goldilocks_products_at_the_carries(a: int, b: int) -> None:
    p = GOLDILOCKS.P
    window = np.array([a % p, b % p, a % p], dtype=np.uint64)
    out = np.zeros(2, dtype=np.uint64)
    cpu_backend.consecutive_products(window, out, GOLDILOCKS)
    assert out.tolist() == [a % p * (b % p) % p] * 2


@each_field
@settings(max_examples=60, deadline=None)
@given(x=st.lists(st.integers(-8, 2**64 - 1), min_size=2, max_size=40))
def test_compiled_products_match_python_integers(field: PrimeField, x: list[int]) -> None:
    values = [v % field.P for v in x]
    window = np.array(values, dtype=np.uint64)
    for dtype in (field.storage, np.uint64):
        out = np.zeros(len(values) - 1, dtype=dtype)
        cpu_backend.consecutive_products(window, out, field)
        assert out.tolist() == [i * j % field.P for i, j in pairwise(values)]


def test_an_unknown_backend_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"backend must be one of numpy, numba, got 'fast'"):
        synthesis.synthesize(1, 0, 4, backend="fast")
    with pytest.raises(ValueError, match="backend must be one of"):
        ProcessSynthesizer(1, backend="fast")


def test_without_numba_the_numba_backend_is_refused_or_falls_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(cpu_backend, "numba_available", lambda: False)
    with pytest.raises(RuntimeError, match="needs Numba"):
        synthesis.synthesize(1, 0, 4, backend="numba")
    with pytest.raises(
        WorkloadError, match=r"PACER_NTT__CPU_BACKEND=numba: backend 'numba' needs Numba"
    ):
        NttWorkload(8, backend="numba")
    with caplog.at_level(logging.INFO, logger="gpu.workload"):
        assert cpu_backend_for("auto", "goldilocks") == "numpy"
        assert cpu_backend_for("auto", "babybear") == "numpy"
    levels = [(r.levelname, r.getMessage().split(":")[1].split(" (")[0]) for r in caplog.records]
    assert levels == [
        (
            "WARNING",
            " goldilocks synthesis and verification run as NumPy calls, at less than half the "
            "compiled rate",
        ),
        ("INFO", " babybear synthesis and verification run as NumPy calls"),
    ]
    assert cpu_backend_for("numpy") == "numpy"


@pytest.mark.slow  # compiles with numba: seconds of CPU (docs/testing.md)
def test_auto_takes_numba_where_it_is_installed(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="gpu.workload"):
        workload = NttWorkload(8, "goldilocks", backend="auto")
    assert workload.kernel == "numba"
    assert "synthesis and verification compiled by Numba" in caplog.text
    a, b, c = workload.synthesize(PartitionSpec("job", 2, 9, {}))
    expected = synthesis.synthesize(9, 2, 8, field=GOLDILOCKS)
    assert all((x == y).all() for x, y in zip((a, b, c), expected, strict=True))
    with pytest.raises(
        WorkloadError, match="PACER_NTT__CPU_BACKEND=fast: backend must be one of numpy, numba"
    ):
        cpu_backend_for("fast")


def test_without_a_writable_cache_the_kernels_compile_anyway(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from numba.core import config

    # A locator that finds no place (it serves only IPython cells): as with no writable
    # directory, Numba refuses to cache.
    monkeypatch.setattr(config, "CACHE_LOCATOR_CLASSES", "_IPythonCacheLocator")
    cpu_backend._kernels.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="gpu.reference.cpu_backend"):
            fast = synthesis.synthesize(4, 1, 6, field=GOLDILOCKS, backend="numba")
        assert caplog.text.count("compile without a disk cache") == 1  # once, not per kernel
        expected = synthesis.synthesize(4, 1, 6, field=GOLDILOCKS)
        assert all((x == y).all() for x, y in zip(fast, expected, strict=True))
    finally:
        cpu_backend._kernels.cache_clear()


@pytest.mark.parametrize(
    ("field", "uint32"),
    [(GOLDILOCKS, False), (BABYBEAR, False), (BABYBEAR, True)],  # as slots and as uint64
    ids=["goldilocks", "babybear-uint64", "babybear-uint32"],
)
# Below, at and past one block of inverted weights, and past the NumPy path's 2^16 steps.
@pytest.mark.parametrize("log_n", [0, 1, 5, 10, 11, 17], ids=lambda n: f"2^{n}")
def test_compiled_verification_sums_match_numpy(
    field: PrimeField, uint32: bool, log_n: int
) -> None:
    rng = np.random.default_rng(log_n)
    vectors = [field.reduce(rng.integers(0, 2**63, 1 << log_n, dtype=np.uint64)) for _ in range(4)]
    vectors[0][:2] = [0, field.P - 1][: 1 << log_n]
    stored = [v.astype(np.uint32) if uint32 else v for v in vectors]
    for seed in range(3):
        r = verification._point_off_domain(1 << log_n, np.random.default_rng(seed), field)
        assert cpu_backend.barycentric_sums(r, log_n, field, *stored[:3]) == (
            verification.barycentric_sums(r, log_n, field, *vectors[:3])
        )
        assert cpu_backend.evaluate(stored[3], r, field) == verification.evaluate(
            vectors[3], r, field
        )


@each_field
def test_compiled_verification_accepts_a_proof_and_rejects_a_wrong_one(field: PrimeField) -> None:
    a, b, c = synthesis.synthesize(3, 1, 9, field=field)
    h = compute_h(a, b, c, field=field)
    for seed in range(3):
        r = verification._point_off_domain(1 << 9, np.random.default_rng(seed), field)
        assert verification.verify(a, b, c, h, r, field=field, backend="numba")
    wrong = c.copy()
    wrong[7] = (int(wrong[7]) + 1) % field.P  # a constraint no longer holds
    assert not verification.verify(a, b, wrong, h, field=field, backend="numba")
    assert not verification.verify(a, b, c, np.roll(h, 1), field=field, backend="numba")
    with pytest.raises(ValueError, match="backend must be one of"):
        verification.verify(a, b, c, h, field=field, backend="fast")


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)
@pytest.mark.parametrize(
    ("count", "threads", "first"),
    [(0, 4, 1), (1, 4, 1), (5, 3, 1), (1000, 7, 1), (4096, 16, 3), (1 << 16, 5, 12345)],
    ids=["none", "one", "short", "uneven-runs", "scaled", "long-scaled"],
)
def test_compiled_powers_are_numpys(
    field: PrimeField, count: int, threads: int, first: int
) -> None:
    base = field.root_of_unity(17)
    powers = field.powers(base, count)
    expected = field.mul(powers, np.uint64(first)) if count else powers
    found = cpu_backend.powers(base, count, field, first, threads)
    assert found.dtype == np.uint64
    assert (found == expected).all()


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)
def test_the_gpus_tables_are_the_same_compiled_or_not(
    field: PrimeField, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpu.reference import ntt

    log_n = 17  # above the length from which the tables' powers are compiled
    scales = ntt._coset_scales.__wrapped__
    compiled = scales(log_n, field.GENERATOR, field), ntt._Plan(log_n, field)
    monkeypatch.setattr(cpu_backend, "numba_available", lambda: False)
    numpy = scales(log_n, field.GENERATOR, field), ntt._Plan(log_n, field)
    for mine, theirs in zip(compiled[0], numpy[0], strict=True):
        assert (mine == theirs).all()
    for mine, theirs in zip(compiled[1].forward, numpy[1].forward, strict=True):
        assert (mine == theirs).all()
    for mine, theirs in zip(compiled[1].backward, numpy[1].backward, strict=True):
        assert (mine == theirs).all()
