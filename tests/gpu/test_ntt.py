"""The NTT against a naive DFT, and compute_h against verify."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import pytest

from gpu import field
from gpu.field import GENERATOR, FieldArray, P
from gpu.ntt import (
    HSteps,
    compute_h,
    coset_intt,
    coset_ntt,
    digest,
    intt,
    ntt,
    synthesize,
    verify,
)

SIZES = [0, 1, 2, 5, 10]


def random_vector(log_n: int, seed: int = 0) -> FieldArray:
    return np.random.default_rng(seed).integers(0, P, 1 << log_n, dtype=np.uint64)


def evaluate(coeffs: list[int], x: int) -> int:
    return sum(c * pow(x, i, P) for i, c in enumerate(coeffs)) % P


def tampered(values: FieldArray) -> FieldArray:
    """A copy with one element changed by +1."""
    copy = values.copy()
    i = len(copy) // 3
    copy[i] = (int(copy[i]) + 1) % P
    return copy


@pytest.mark.parametrize("log_n", range(13), ids=lambda k: f"n=2^{k}")
def test_intt_undoes_ntt(log_n: int) -> None:
    values = random_vector(log_n)
    assert (intt(ntt(values)) == values).all()
    assert (ntt(intt(values)) == values).all()


@pytest.mark.parametrize("log_n", range(6), ids=lambda k: f"n=2^{k}")
def test_ntt_matches_naive_dft(log_n: int) -> None:
    values = field.to_ints(random_vector(log_n, seed=log_n))
    root = field.root_of_unity(log_n)
    expected = [evaluate(values, pow(root, k, P)) for k in range(1 << log_n)]
    assert field.to_ints(ntt(values)) == expected


@pytest.mark.parametrize("log_n", range(5), ids=lambda k: f"n=2^{k}")
def test_coset_ntt_evaluates_on_the_shifted_domain(log_n: int) -> None:
    coeffs = field.to_ints(random_vector(log_n, seed=log_n))
    root = field.root_of_unity(log_n)
    expected = [evaluate(coeffs, 7 * pow(root, k, P) % P) for k in range(1 << log_n)]
    assert field.to_ints(coset_ntt(coeffs, shift=7)) == expected


@pytest.mark.parametrize("shift", [GENERATOR, 7, P - 1], ids=lambda s: f"shift={s}")
@pytest.mark.parametrize("log_n", [0, 1, 3, 8, 12], ids=lambda k: f"n=2^{k}")
def test_coset_intt_undoes_coset_ntt(log_n: int, shift: int) -> None:
    coeffs = random_vector(log_n)
    assert (coset_intt(coset_ntt(coeffs, shift), shift) == coeffs).all()


def test_transforms_leave_their_input_alone() -> None:
    values = random_vector(6)
    before = values.copy()
    for transform in (ntt, intt, coset_ntt, coset_intt):
        transform(values)
    assert (values == before).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("log_n", SIZES, ids=lambda k: f"n=2^{k}")
def test_compute_h_passes_verify(log_n: int, seed: int) -> None:
    a, b, c = synthesize(seed, index=3, log_n=log_n)
    h = compute_h(a, b, c)
    assert verify(a, b, c, h, rng=np.random.default_rng(seed))


@pytest.mark.parametrize("log_n", SIZES, ids=lambda k: f"n=2^{k}")
def test_h_has_degree_at_most_n_minus_2(log_n: int) -> None:
    h = compute_h(*synthesize(seed=5, index=0, log_n=log_n))
    assert h.shape == (1 << log_n,)
    assert h[-1] == 0


def test_compute_h_matches_the_polynomial_quotient() -> None:
    a, b, c = synthesize(seed=9, index=1, log_n=2)
    h = field.to_ints(compute_h(a, b, c))
    x = 1234567
    a_x, b_x, c_x = (evaluate(field.to_ints(intt(v)), x) for v in (a, b, c))
    assert evaluate(h, x) * (pow(x, 4, P) - 1) % P == (a_x * b_x - c_x) % P


@pytest.mark.parametrize("target", ["a", "b", "c", "h"])
@pytest.mark.parametrize("log_n", [0, 3, 10], ids=lambda k: f"n=2^{k}")
def test_verify_fails_when_one_element_is_tampered(log_n: int, target: str) -> None:
    a, b, c = synthesize(seed=11, index=0, log_n=log_n)
    vectors = {"a": a, "b": b, "c": c, "h": compute_h(a, b, c)}
    vectors[target] = tampered(vectors[target])
    rng = np.random.default_rng(0)
    assert not verify(vectors["a"], vectors["b"], vectors["c"], vectors["h"], rng=rng)


def test_verify_accepts_a_given_point_off_the_domain() -> None:
    a, b, c = synthesize(seed=2, index=2, log_n=4)
    h = compute_h(a, b, c)
    assert verify(a, b, c, h, r=GENERATOR)
    assert verify(a, b, c, h, r=0)
    assert not verify(a, b, c, tampered(h), r=GENERATOR)


def test_verify_draws_its_own_point_by_default() -> None:
    a, b, c = synthesize(seed=2, index=2, log_n=4)
    assert verify(a, b, c, compute_h(a, b, c))


def test_steps_one_at_a_time_match_compute_h() -> None:
    steps = HSteps(log_n=6)
    a, b, c = synthesize(seed=4, index=7, log_n=6)
    coeffs = steps.intt(a, b, c)
    h = steps.coset_intt(steps.pointwise(*steps.coset_ntt(*coeffs)))
    assert (h == compute_h(a, b, c)).all()
    assert (h == steps.run(a, b, c)).all()
    assert steps.z_on_coset == (pow(GENERATOR, 64, P) - 1) % P


def test_synthesize_is_deterministic_and_satisfied() -> None:
    a, b, c = synthesize(seed=3, index=4, log_n=8)
    again = synthesize(seed=3, index=4, log_n=8)
    assert all((x == y).all() for x, y in zip((a, b, c), again, strict=True))
    assert (c == field.mul(a, b)).all()
    assert a.dtype == np.uint64
    assert a.shape == (256,)
    assert int(max(a.max(), b.max())) < P


@pytest.mark.parametrize(("other_seed", "other_index"), [(3, 5), (4, 4)], ids=["index", "seed"])
def test_synthesize_differs_between_partitions(other_seed: int, other_index: int) -> None:
    a, b, _ = synthesize(seed=3, index=4, log_n=8)
    other_a, other_b, _ = synthesize(other_seed, other_index, log_n=8)
    assert (a != other_a).any()
    assert (b != other_b).any()


def test_digest_hashes_little_endian_uint32() -> None:
    h = compute_h(*synthesize(seed=1, index=0, log_n=5))
    expected = hashlib.sha256(h.astype("<u4").tobytes()).hexdigest()
    assert digest(h) == expected
    assert len(expected) == 64
    assert digest(tampered(h)) != expected


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(
            lambda: ntt([1, 2, 3]), "values length must be a power of two, got 3", id="ntt-length"
        ),
        pytest.param(
            lambda: intt(np.zeros(0, dtype=np.uint64)),
            "values length must be a power of two, got 0",
            id="intt-empty",
        ),
        pytest.param(
            lambda: ntt(np.zeros((2, 2), dtype=np.uint64)),
            r"values must be one-dimensional, got shape \(2, 2\)",
            id="ntt-2d",
        ),
        pytest.param(
            lambda: ntt(np.broadcast_to(np.uint64(0), (1 << 28,))),
            r"values length must be at most 2\^27 \(the field's two-adicity\), got 2\^28",
            id="ntt-too-long",
        ),
        pytest.param(
            lambda: ntt([0, P]),
            r"field elements must be in \[0, 2013265921\), got 2013265921 at index \[1\]",
            id="ntt-out-of-range",
        ),
        pytest.param(
            lambda: coset_ntt([1, 2], shift=0),
            r"shift must be a nonzero field element in \[1, 2013265921\), got 0",
            id="coset-shift-zero",
        ),
        pytest.param(
            lambda: coset_intt([1, 2], shift=P),
            "shift must be a nonzero field element",
            id="coset-shift-too-large",
        ),
        pytest.param(
            lambda: synthesize(seed=0, index=0, log_n=28),
            "log_n must be between 0 and 27, got 28",
            id="synthesize-log-n",
        ),
        pytest.param(
            lambda: synthesize(seed=-1, index=0, log_n=3),
            "seed must be non-negative, got -1",
            id="synthesize-seed",
        ),
        pytest.param(
            lambda: HSteps(log_n=-1), "log_n must be between 0 and 27, got -1", id="steps-log-n"
        ),
        pytest.param(
            lambda: compute_h([1, 2], [1, 2], [1, 2, 3, 4]),
            "c must have length n = 2, got 4",
            id="compute-h-lengths",
        ),
        pytest.param(
            lambda: compute_h([1, 2, 3], [1, 2, 3], [1, 2, 3]),
            "a length must be a power of two, got 3",
            id="compute-h-not-power-of-two",
        ),
        pytest.param(
            lambda: compute_h([1, -2], [1, 2], [1, 4]),
            "field elements must be in",
            id="compute-h-negative",
        ),
        pytest.param(
            lambda: verify([1, 2], [1, 2], [1, 4], [0]),
            r"h must have the length of a \(2\), got 1",
            id="verify-lengths",
        ),
        pytest.param(
            lambda: verify([1, 2], [1, 2], [1, 4], [0, 0], r=P - 1),
            r"r must be a field element outside the domain \(r\^n ≠ 1\), got 2013265920",
            id="verify-r-in-domain",
        ),
        pytest.param(
            lambda: verify([1, 2], [1, 2], [1, 4], [0, 0], r=P),
            "r must be a field element outside the domain",
            id="verify-r-out-of-range",
        ),
        pytest.param(lambda: digest([P]), "field elements must be in", id="digest-out-of-range"),
    ],
)
def test_invalid_input_raises_with_the_rule(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
