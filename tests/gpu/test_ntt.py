"""The NTT against a naive DFT, and compute_h against verify."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import gpu.ntt as ntt_module
from gpu import field
from gpu.field import GENERATOR, FieldArray, P
from gpu.ntt import (
    HSteps,
    compute_h,
    coset_intt,
    coset_ntt,
    digest,
    digest_lanes,
    intt,
    ntt,
    synthesize,
    synthesize_into,
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


# verify works through its vectors in chunks; a chunk of 16 makes small sizes take many steps.
CHUNKS = [pytest.param(None, id="one-chunk"), pytest.param(16, id="chunks-of-16")]


def use_chunk(monkeypatch: pytest.MonkeyPatch, chunk: int | None) -> None:
    if chunk is not None:
        monkeypatch.setattr(ntt_module, "_VERIFY_CHUNK", chunk)


def points_off_domain(log_n: int, count: int) -> list[int]:
    """0, GENERATOR and ``count`` random elements, none of them in <ω>."""
    rng = np.random.default_rng(log_n)
    points = [0, GENERATOR, *(int(x) for x in rng.integers(0, P, count))]
    assert all(pow(x, 1 << log_n, P) != 1 for x in points)
    return points


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("log_n", [0, 1, 2, 5, 12], ids=lambda k: f"n=2^{k}")
def test_barycentric_sums_evaluate_the_interpolating_polynomial(
    log_n: int, chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_chunk(monkeypatch, chunk)
    n = 1 << log_n
    vectors = [random_vector(log_n, seed) for seed in range(3)]
    coeffs = [field.to_ints(intt(v)) for v in vectors]
    for r in points_off_domain(log_n, count=2):
        scale = (pow(r, n, P) - 1) * pow(n, -1, P)
        sums = ntt_module._barycentric_sums(r, log_n, *vectors)
        assert [scale * s % P for s in sums] == [evaluate(c, r) for c in coeffs]


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("log_n", [0, 1, 3, 12], ids=lambda k: f"n=2^{k}")
def test_evaluate_matches_horner(
    log_n: int, chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_chunk(monkeypatch, chunk)
    coeffs = random_vector(log_n, seed=1)
    for x in points_off_domain(log_n, count=2):
        assert ntt_module._evaluate(coeffs, x) == evaluate(field.to_ints(coeffs), x)


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("log_n", [0, 1, 5, 12], ids=lambda k: f"n=2^{k}")
def test_verify_accepts_h_and_rejects_a_tampered_h_or_c(
    log_n: int, chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_chunk(monkeypatch, chunk)
    a, b, c = synthesize(seed=6, index=1, log_n=log_n)
    h = compute_h(a, b, c)
    for r in points_off_domain(log_n, count=2):
        assert verify(a, b, c, h, r=r)
        if r != 0 or log_n == 0:  # H(0) is h[0], and tampered(h) changes h[n // 3]
            assert not verify(a, b, c, tampered(h), r=r)
        assert not verify(a, b, tampered(c), h, r=r)


@pytest.mark.parametrize("log_n", [0, 1, 3, 12], ids=lambda k: f"n=2^{k}")
def test_verify_refuses_every_given_point_in_the_domain(log_n: int) -> None:
    a, b, c = synthesize(seed=6, index=1, log_n=log_n)
    h = compute_h(a, b, c)
    root = field.root_of_unity(log_n)
    for k in {0, 1, (1 << log_n) // 2, (1 << log_n) - 1}:
        r = pow(root, k, P)
        with pytest.raises(ValueError, match=rf"outside the domain \(r\^n ≠ 1\), got {r}$"):
            verify(a, b, c, h, r=r)


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


def fnv_lanes_by_loop(values: list[int], lanes: int) -> list[int]:
    """FNV-1a/64 per lane, element by element, in plain Python integers."""
    state = [0xCBF29CE484222325] * lanes
    for i, value in enumerate(values):
        lane = i % lanes
        state[lane] = ((state[lane] ^ value) * 0x100000001B3) % 2**64
    return state


@pytest.mark.parametrize("log_n", [0, 3, 17], ids=lambda n: f"2^{n}")
def test_digest_is_sha256_of_the_size_and_fnv_lanes(log_n: int) -> None:
    rng = np.random.default_rng(log_n)
    h = rng.integers(0, P, 1 << log_n, dtype=np.uint64)
    lanes = min(1 << log_n, ntt_module.DIGEST_LANES)
    state = fnv_lanes_by_loop(h.tolist(), lanes)
    assert digest_lanes(h).tolist() == state
    packed = (1 << log_n).to_bytes(8, "little") + b"".join(x.to_bytes(8, "little") for x in state)
    assert digest(h) == hashlib.sha256(packed).hexdigest()
    assert digest(tampered(h)) != digest(h)


def test_digest_tells_apart_a_swap_within_a_lane_and_across_lanes() -> None:
    h = compute_h(*synthesize(seed=1, index=0, log_n=18))
    lanes = ntt_module.DIGEST_LANES
    for i, j in ((0, lanes), (0, 1)):  # same lane, different rows; neighbouring lanes
        swapped = h.copy()
        swapped[[i, j]] = h[[j, i]]
        assert h[i] != h[j]
        assert digest(swapped) != digest(h)


@pytest.mark.parametrize("log_n", [0, 5, 18, 19], ids=lambda n: f"2^{n}")
def test_synthesize_into_writes_what_synthesize_returns(log_n: int) -> None:
    expected = synthesize(seed=8, index=2, log_n=log_n)
    for dtype in (np.uint32, np.uint64):
        out = tuple(np.zeros(1 << log_n, dtype=dtype) for _ in range(3))
        synthesize_into(8, 2, out)
        assert all((o == e).all() for o, e in zip(out, expected, strict=True))


@pytest.mark.parametrize(("chunk", "product_chunk"), [(8, 4), (16, 16), (64, 8)])
def test_synthesis_steps_do_not_change_what_is_written(
    monkeypatch: pytest.MonkeyPatch, chunk: int, product_chunk: int
) -> None:
    expected = synthesize(seed=3, index=5, log_n=9)
    monkeypatch.setattr(ntt_module, "SYNTHESIS_CHUNK", chunk)
    monkeypatch.setattr(ntt_module, "_PRODUCT_CHUNK", product_chunk)
    a, b, c = synthesize(seed=3, index=5, log_n=9)
    assert all((x == e).all() for x, e in zip((a, b, c), expected, strict=True))
    ints = a.tolist()
    assert b.tolist() == ints[1:] + ints[:1]
    assert c.tolist() == [x * y % P for x, y in zip(ints, ints[1:] + ints[:1], strict=True)]


@pytest.mark.parametrize("step", [2, 8, 64, 1 << 20])
def test_a_threaded_step_writes_the_same_values(step: int) -> None:
    expected = synthesize(seed=6, index=2, log_n=9)
    out = tuple(np.zeros(1 << 9, dtype=np.uint32) for _ in range(3))
    synthesize_into(6, 2, out, step=step)
    assert all((o == e).all() for o, e in zip(out, expected, strict=True))


@pytest.mark.parametrize("step", [0, 1, 3, 96])
def test_a_step_that_is_not_a_power_of_two_is_refused(step: int) -> None:
    out = tuple(np.zeros(64, dtype=np.uint32) for _ in range(3))
    with pytest.raises(ValueError, match=f"step must be a power of two of at least 2, got {step}"):
        synthesize_into(1, 0, out, step=step)


def test_synthesize_draws_spread_over_the_field_and_b_is_a_rotated() -> None:
    a, b, _ = synthesize(seed=1, index=0, log_n=16)
    assert int(a.max()) < P
    counts = np.histogram(a, bins=16, range=(0, P))[0]
    assert counts.min() > 0.5 * counts.mean()  # no empty or starved region
    assert len(np.unique(a)) > 0.99 * a.size
    assert (b == np.roll(a, -1)).all()


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ((np.zeros(8, np.uint32), np.zeros(8, np.uint32), np.zeros(4, np.uint32)), "out c must be"),
        ((np.zeros(8, np.int64), np.zeros(8, np.uint32), np.zeros(8, np.uint32)), "out a must be"),
    ],
    ids=["length", "dtype"],
)
def test_synthesize_into_refuses_bad_buffers(out: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        synthesize_into(1, 0, out)


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
