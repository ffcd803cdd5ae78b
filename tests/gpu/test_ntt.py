"""The CPU reference over BabyBear and Goldilocks: the NTT against a naive DFT, compute_h
against verify, synthesis and the digest."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import gpu.reference.synthesis as synthesis_module
import gpu.reference.verification as verification_module
from gpu.field.babybear import BABYBEAR
from gpu.field.goldilocks import GOLDILOCKS
from gpu.field.prime import FieldArray, PrimeField
from gpu.reference.digest import DIGEST_LANES, digest, digest_lanes
from gpu.reference.ntt import HSteps, compute_h, coset_intt, coset_ntt, intt, ntt
from gpu.reference.synthesis import synthesize, synthesize_into
from gpu.reference.verification import barycentric_sums, verify

FIELDS = [BABYBEAR, GOLDILOCKS]
each_field = pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)

SIZES = [0, 1, 2, 5, 10]
P = BABYBEAR.P  # the field of the tests about BabyBear's own limits and messages
GP = GOLDILOCKS.P


def edge_values(field: PrimeField) -> list[int]:
    """Elements where carries and reductions change: around 0, p, 2^31, 2^32 and p / 2."""
    return sorted(
        {
            x % field.P
            for x in (
                0,
                1,
                2,
                field.P - 1,
                field.P - 2,
                field.P // 2,
                field.P // 2 + 1,
                2**31,
                2**32 - 1,
            )
        }
    )


def random_vector(field: PrimeField, log_n: int, seed: int = 0) -> FieldArray:
    """2^log_n random elements, with as many of `edge_values` as fit at random places."""
    rng = np.random.default_rng(seed)
    n = 1 << log_n
    values = rng.integers(0, field.P, n, dtype=np.uint64)  # high is exclusive: fits uint64 for both
    edges = edge_values(field)[:n]
    values[rng.permutation(n)[: len(edges)]] = edges
    return values


def evaluate(field: PrimeField, coeffs: list[int], x: int) -> int:
    """Σ coeffs_i·x^i mod p by Horner's rule, in Python integers."""
    total = 0
    for c in reversed(coeffs):
        total = (total * x + c) % field.P
    return total


def tampered(field: PrimeField, values: FieldArray) -> FieldArray:
    """A copy with one element changed by +1."""
    copy = values.copy()
    i = len(copy) // 3
    copy[i] = (int(copy[i]) + 1) % field.P
    return copy


@each_field
def test_random_vectors_reach_the_top_of_the_field(field: PrimeField) -> None:
    # The helper itself: Goldilocks vectors must use all 64 bits, or its carries go untested.
    values = field.to_ints(random_vector(field, 12))
    assert max(values) == field.P - 1
    assert all(0 <= v < field.P for v in values)
    assert sum(v >= field.P // 2 for v in values) > 0.4 * len(values)


@each_field
@pytest.mark.parametrize("log_n", range(13), ids=lambda k: f"n=2^{k}")
def test_intt_undoes_ntt(field: PrimeField, log_n: int) -> None:
    values = random_vector(field, log_n)
    assert (intt(ntt(values, field=field), field=field) == values).all()
    assert (ntt(intt(values, field=field), field=field) == values).all()


@each_field
@pytest.mark.parametrize("log_n", range(6), ids=lambda k: f"n=2^{k}")
def test_ntt_matches_naive_dft(field: PrimeField, log_n: int) -> None:
    values = field.to_ints(random_vector(field, log_n, seed=log_n))
    root = field.root_of_unity(log_n)
    expected = [evaluate(field, values, pow(root, k, field.P)) for k in range(1 << log_n)]
    assert field.to_ints(ntt(np.array(values, dtype=np.uint64), field=field)) == expected
    # And the inverse: the coefficients back from those evaluations.
    assert field.to_ints(intt(np.array(expected, dtype=np.uint64), field=field)) == values


SHIFTS = [
    pytest.param(lambda field: None, id="default"),
    pytest.param(lambda field: field.GENERATOR, id="generator"),
    pytest.param(lambda field: 7, id="7"),
    pytest.param(lambda field: field.P - 1, id="p-1"),
]


@each_field
@pytest.mark.parametrize("shift_of", SHIFTS)
@pytest.mark.parametrize("log_n", range(5), ids=lambda k: f"n=2^{k}")
def test_coset_ntt_evaluates_on_the_shifted_domain(
    field: PrimeField, log_n: int, shift_of: Callable[[PrimeField], int | None]
) -> None:
    shift = shift_of(field)
    coeffs = field.to_ints(random_vector(field, log_n, seed=log_n))
    root = field.root_of_unity(log_n)
    s = field.GENERATOR if shift is None else shift  # the default is the field's generator
    expected = [
        evaluate(field, coeffs, s * pow(root, k, field.P) % field.P) for k in range(1 << log_n)
    ]
    assert (
        field.to_ints(coset_ntt(np.array(coeffs, dtype=np.uint64), shift, field=field)) == expected
    )
    assert (
        field.to_ints(coset_intt(np.array(expected, dtype=np.uint64), shift, field=field)) == coeffs
    )


@each_field
@pytest.mark.parametrize("shift_of", SHIFTS)
@pytest.mark.parametrize("log_n", [0, 1, 3, 8, 12], ids=lambda k: f"n=2^{k}")
def test_coset_intt_undoes_coset_ntt(
    field: PrimeField, log_n: int, shift_of: Callable[[PrimeField], int | None]
) -> None:
    shift = shift_of(field)
    coeffs = random_vector(field, log_n)
    assert (coset_intt(coset_ntt(coeffs, shift, field=field), shift, field=field) == coeffs).all()


@each_field
def test_transforms_leave_their_input_alone(field: PrimeField) -> None:
    values = random_vector(field, 6)
    before = values.copy()
    transforms: list[Callable[..., FieldArray]] = [ntt, intt, coset_ntt, coset_intt]
    for transform in transforms:
        assert (transform(values, field=field) != before).any()
    assert (values == before).all()


def test_the_default_field_is_babybear() -> None:
    values = random_vector(BABYBEAR, 4)
    a, b, c = synthesize(seed=1, index=2, log_n=4)
    h = compute_h(a, b, c)
    assert (ntt(values) == ntt(values, field=BABYBEAR)).all()
    assert (intt(values) == intt(values, field=BABYBEAR)).all()
    assert (coset_ntt(values) == coset_ntt(values, BABYBEAR.GENERATOR, field=BABYBEAR)).all()
    assert (coset_intt(values) == coset_intt(values, BABYBEAR.GENERATOR, field=BABYBEAR)).all()
    assert all(
        (x == y).all() for x, y in zip((a, b, c), synthesize(1, 2, 4, field=BABYBEAR), strict=True)
    )
    assert (h == compute_h(a, b, c, field=BABYBEAR)).all()
    assert HSteps(4).field is BABYBEAR
    # The same inputs over Goldilocks give other results, so the comparisons above can fail.
    assert (ntt(values, field=GOLDILOCKS) != ntt(values)).any()
    assert (synthesize(1, 2, 4, field=GOLDILOCKS)[0] != a).any()


@each_field
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("log_n", SIZES, ids=lambda k: f"n=2^{k}")
def test_compute_h_passes_verify(field: PrimeField, log_n: int, seed: int) -> None:
    a, b, c = synthesize(seed, index=3, log_n=log_n, field=field)
    h = compute_h(a, b, c, field=field)
    assert verify(a, b, c, h, rng=np.random.default_rng(seed), field=field)


@each_field
@pytest.mark.parametrize("log_n", SIZES, ids=lambda k: f"n=2^{k}")
def test_h_has_degree_at_most_n_minus_2(field: PrimeField, log_n: int) -> None:
    h = compute_h(*synthesize(seed=5, index=0, log_n=log_n, field=field), field=field)
    assert h.shape == (1 << log_n,)
    assert h[-1] == 0
    if log_n >= 2:
        assert (h[:-1] != 0).any()


@each_field
@pytest.mark.parametrize("log_n", [2, 5], ids=lambda k: f"n=2^{k}")
def test_compute_h_matches_the_polynomial_quotient(field: PrimeField, log_n: int) -> None:
    a, b, c = synthesize(seed=9, index=1, log_n=log_n, field=field)
    h = field.to_ints(compute_h(a, b, c, field=field))
    coeffs = [field.to_ints(intt(v, field=field)) for v in (a, b, c)]
    for x in (1234567, field.P - 2, field.P // 3):
        a_x, b_x, c_x = (evaluate(field, v, x) for v in coeffs)
        z_x = pow(x, 1 << log_n, field.P) - 1
        assert evaluate(field, h, x) * z_x % field.P == (a_x * b_x - c_x) % field.P


@each_field
@pytest.mark.parametrize("target", ["a", "b", "c", "h"])
@pytest.mark.parametrize("log_n", [0, 3, 10], ids=lambda k: f"n=2^{k}")
def test_verify_fails_when_one_element_is_tampered(
    field: PrimeField, log_n: int, target: str
) -> None:
    a, b, c = synthesize(seed=11, index=0, log_n=log_n, field=field)
    vectors = {"a": a, "b": b, "c": c, "h": compute_h(a, b, c, field=field)}
    vectors[target] = tampered(field, vectors[target])
    rng = np.random.default_rng(0)
    assert not verify(vectors["a"], vectors["b"], vectors["c"], vectors["h"], rng=rng, field=field)


@each_field
def test_verify_accepts_a_given_point_off_the_domain(field: PrimeField) -> None:
    a, b, c = synthesize(seed=2, index=2, log_n=4, field=field)
    h = compute_h(a, b, c, field=field)
    assert verify(a, b, c, h, r=field.GENERATOR, field=field)
    assert verify(a, b, c, h, r=0, field=field)
    assert not verify(a, b, c, tampered(field, h), r=field.GENERATOR, field=field)


@each_field
def test_verify_draws_its_own_point_by_default(field: PrimeField) -> None:
    a, b, c = synthesize(seed=2, index=2, log_n=4, field=field)
    h = compute_h(a, b, c, field=field)
    assert verify(a, b, c, h, field=field)
    assert not verify(a, b, c, tampered(field, h), field=field)


def test_h_of_one_field_does_not_verify_in_the_other() -> None:
    a, b, c = synthesize(seed=2, index=2, log_n=4)  # BabyBear elements are Goldilocks ones too
    h = compute_h(a, b, c)
    assert verify(a, b, c, h, r=BABYBEAR.GENERATOR)
    assert not verify(a, b, c, h, r=BABYBEAR.GENERATOR, field=GOLDILOCKS)


# verify works through its vectors in chunks; a chunk of 16 makes small sizes take many steps.
CHUNKS = [pytest.param(None, id="one-chunk"), pytest.param(16, id="chunks-of-16")]


def use_chunk(monkeypatch: pytest.MonkeyPatch, chunk: int | None) -> None:
    if chunk is not None:
        monkeypatch.setattr(verification_module, "_VERIFY_CHUNK", chunk)


def points_off_domain(field: PrimeField, log_n: int, count: int) -> list[int]:
    """0, GENERATOR, p − 2 and ``count`` random elements, none of them in <ω>."""
    rng = np.random.default_rng(log_n)
    random = (int(x) for x in rng.integers(0, field.P, count, dtype=np.uint64))
    points = [0, field.GENERATOR, field.P - 2, *random]
    assert all(pow(x, 1 << log_n, field.P) != 1 for x in points)
    return points


@each_field
@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("log_n", [0, 1, 2, 5, 12], ids=lambda k: f"n=2^{k}")
def test_barycentric_sums_evaluate_the_interpolating_polynomial(
    field: PrimeField, log_n: int, chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_chunk(monkeypatch, chunk)
    n = 1 << log_n
    vectors = [random_vector(field, log_n, seed) for seed in range(3)]
    coeffs = [field.to_ints(intt(v, field=field)) for v in vectors]
    for r in points_off_domain(field, log_n, count=2):
        scale = (pow(r, n, field.P) - 1) * pow(n, -1, field.P)
        sums = barycentric_sums(r, log_n, field, *vectors)
        assert [scale * s % field.P for s in sums] == [evaluate(field, c, r) for c in coeffs]


@each_field
@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("log_n", [0, 1, 3, 12], ids=lambda k: f"n=2^{k}")
def test_evaluate_matches_horner(
    field: PrimeField, log_n: int, chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_chunk(monkeypatch, chunk)
    coeffs = random_vector(field, log_n, seed=1)
    for x in points_off_domain(field, log_n, count=2):
        assert verification_module.evaluate(coeffs, x, field) == evaluate(
            field, field.to_ints(coeffs), x
        )


@each_field
@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("log_n", [0, 1, 5, 12], ids=lambda k: f"n=2^{k}")
def test_verify_accepts_h_and_rejects_a_tampered_h_or_c(
    field: PrimeField, log_n: int, chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_chunk(monkeypatch, chunk)
    a, b, c = synthesize(seed=6, index=1, log_n=log_n, field=field)
    h = compute_h(a, b, c, field=field)
    for r in points_off_domain(field, log_n, count=2):
        assert verify(a, b, c, h, r=r, field=field)
        if r != 0 or log_n == 0:  # H(0) is h[0], and tampered(h) changes h[n // 3]
            assert not verify(a, b, c, tampered(field, h), r=r, field=field)
        assert not verify(a, b, tampered(field, c), h, r=r, field=field)


@each_field
@pytest.mark.parametrize("log_n", [0, 1, 3, 12], ids=lambda k: f"n=2^{k}")
def test_verify_refuses_every_given_point_in_the_domain(field: PrimeField, log_n: int) -> None:
    a, b, c = synthesize(seed=6, index=1, log_n=log_n, field=field)
    h = compute_h(a, b, c, field=field)
    root = field.root_of_unity(log_n)
    for k in {0, 1, (1 << log_n) // 2, (1 << log_n) - 1}:
        r = pow(root, k, field.P)
        with pytest.raises(ValueError, match=rf"outside the domain \(r\^n ≠ 1\), got {r}$"):
            verify(a, b, c, h, r=r, field=field)


@each_field
def test_steps_one_at_a_time_match_compute_h(field: PrimeField) -> None:
    steps = HSteps(log_n=6, field=field)
    a, b, c = synthesize(seed=4, index=7, log_n=6, field=field)
    coeffs = steps.intt(a, b, c)
    assert all((x == intt(v, field=field)).all() for x, v in zip(coeffs, (a, b, c), strict=True))
    evals = steps.coset_ntt(*coeffs)
    assert all((e == coset_ntt(x, field=field)).all() for e, x in zip(evals, coeffs, strict=True))
    h = steps.coset_intt(steps.pointwise(*evals))
    assert (h == compute_h(a, b, c, field=field)).all()
    assert (h == steps.run(a, b, c)).all()
    assert steps.field is field
    assert steps.z_on_coset == (pow(field.GENERATOR, 64, field.P) - 1) % field.P


@each_field
def test_synthesize_is_deterministic_and_satisfied(field: PrimeField) -> None:
    a, b, c = synthesize(seed=3, index=4, log_n=8, field=field)
    again = synthesize(seed=3, index=4, log_n=8, field=field)
    assert all((x == y).all() for x, y in zip((a, b, c), again, strict=True))
    assert (c == field.mul(a, b)).all()
    assert all(x.dtype == np.uint64 and x.shape == (256,) for x in (a, b, c))
    assert int(max(a.max(), b.max(), c.max())) < field.P


@each_field
@pytest.mark.parametrize(("other_seed", "other_index"), [(3, 5), (4, 4)], ids=["index", "seed"])
def test_synthesize_differs_between_partitions(
    field: PrimeField, other_seed: int, other_index: int
) -> None:
    a, b, _ = synthesize(seed=3, index=4, log_n=8, field=field)
    other_a, other_b, _ = synthesize(other_seed, other_index, log_n=8, field=field)
    assert (a != other_a).any()
    assert (b != other_b).any()


def fnv_lanes_by_loop(values: list[int], lanes: int) -> list[int]:
    """FNV-1a/64 per lane, element by element, in plain Python integers."""
    state = [0xCBF29CE484222325] * lanes
    for i, value in enumerate(values):
        lane = i % lanes
        state[lane] = ((state[lane] ^ value) * 0x100000001B3) % 2**64
    return state


@each_field
@pytest.mark.parametrize("log_n", [0, 3, 17], ids=lambda n: f"2^{n}")
def test_digest_is_sha256_of_the_size_and_fnv_lanes(field: PrimeField, log_n: int) -> None:
    h = random_vector(field, log_n, seed=log_n)
    lanes = min(1 << log_n, DIGEST_LANES)
    state = fnv_lanes_by_loop(h.tolist(), lanes)
    assert digest_lanes(h).tolist() == state
    packed = (1 << log_n).to_bytes(8, "little") + b"".join(x.to_bytes(8, "little") for x in state)
    assert digest(h, field=field) == hashlib.sha256(packed).hexdigest()
    assert digest(tampered(field, h), field=field) != digest(h, field=field)


@each_field
def test_digest_tells_apart_a_swap_within_a_lane_and_across_lanes(field: PrimeField) -> None:
    h = random_vector(field, 17, seed=1)
    lanes = DIGEST_LANES
    for i, j in ((0, lanes), (0, 1)):  # same lane, different rows; neighbouring lanes
        swapped = h.copy()
        swapped[[i, j]] = h[[j, i]]
        assert h[i] != h[j]
        assert digest(swapped, field=field) != digest(h, field=field)


# Recorded with the BabyBear-only gpu.field.prime and gpu.reference.ntt before Goldilocks came:
# BabyBear's
# synthesis and transforms must stay bit for bit what they were (a GPU port compares digests).
BABYBEAR_DIGESTS = {
    3: {
        "a": "55fa2ffe0668984f42fc09df232d9a3a65f76eb30a2682313dc58ac226c4c6f9",
        "b": "d53c73fc7b89e76eef7ee576eb1fbcaff6e420534ee8372d7825f2b74e4f37c6",
        "c": "b597cf1abfff20e8971547437139b6cbb54f5b3cd74e493a1917d4046dfa466c",
        "h": "bc5ebe3993b3573378ca42daf2a4f1590fca4f91831a5ea8064ff8c780ca1270",
        "ntt(a)": "9c6408a7ba4edee9bf80a146b5be6e5473f205cf71c3c7a98d9173eef7484b2d",
        "coset_ntt(a)": "3bd56f162b1a05d9777ce6d0b317a624a25a27cc651035abe4f75085c92f1392",
    },
    12: {
        "a": "04db75ba7ff3dd1eeda7a21fbfea4d6f7afdabad3e55cb1bd347d6b0c219a687",
        "b": "bf7cf2686ff43eb957b3c5384b12f6a7667f89c1db14e5f44fe4906bdf128668",
        "c": "d71a286b0c8cf41cea30f6cbfe6a675d0f8578facde515a3cc4d37c25d38fc90",
        "h": "a21786b618e80193a5ad9fb31a978cd49a7d2cab6007b765feb24a713b651d77",
        "ntt(a)": "7692fe4754f958625f74d229f3e1f84bc62a72e0cffc688450c2f44e393fb4b0",
        "coset_ntt(a)": "65a0024ec7437133c728ef2e1044de90d5f825c6292ce597d2b8293741b0d7ab",
    },
    19: {  # more than one SYNTHESIS_CHUNK
        "a": "a76d6f21574ec0870f4b1d437015e23774943b450282cd3e501e57c7d126a47e",
        "b": "b215eee20cf1c43f3d53874559b14f49159a873d4ee5bf0a375145caa9e8e9ce",
        "c": "6a7555ca711aa6d589ab5f476881be21b7e559c39e6df242225ce400f3d0c4ea",
    },
}


@pytest.mark.parametrize("log_n", sorted(BABYBEAR_DIGESTS), ids=lambda n: f"2^{n}")
def test_babybear_results_are_what_they_were_before_goldilocks(log_n: int) -> None:
    a, b, c = synthesize(seed=5, index=1, log_n=log_n)
    results = {"a": a, "b": b, "c": c}
    if log_n <= 12:
        results |= {"h": compute_h(a, b, c), "ntt(a)": ntt(a), "coset_ntt(a)": coset_ntt(a)}
    assert {name: digest(v) for name, v in results.items()} == BABYBEAR_DIGESTS[log_n]


@each_field
@pytest.mark.parametrize("log_n", [0, 5, 18, 19], ids=lambda n: f"2^{n}")
def test_synthesize_into_writes_what_synthesize_returns(field: PrimeField, log_n: int) -> None:
    expected = synthesize(seed=8, index=2, log_n=log_n, field=field)
    for dtype in sorted({field.storage, np.dtype(np.uint64)}, key=str):
        out = tuple(np.zeros(1 << log_n, dtype=dtype) for _ in range(3))
        synthesize_into(8, 2, out, field=field)
        assert all(o.dtype == dtype for o in out)
        assert all((o == e).all() for o, e in zip(out, expected, strict=True))


def test_goldilocks_synthesis_writes_uint64_and_refuses_uint32() -> None:
    expected = synthesize(seed=8, index=2, log_n=6, field=GOLDILOCKS)
    assert int(expected[0].max()) >= 2**32  # the values need all 64 bits
    out = tuple(np.zeros(64, dtype=np.uint64) for _ in range(3))
    synthesize_into(8, 2, out, field=GOLDILOCKS)
    assert all((o == e).all() for o, e in zip(out, expected, strict=True))
    narrow = tuple(np.zeros(64, dtype=np.uint32) for _ in range(3))
    message = r"^out a must be a uint64 vector of 2\^6 elements, got uint32 \(64,\)$"
    with pytest.raises(ValueError, match=message):
        synthesize_into(8, 2, narrow, field=GOLDILOCKS)
    assert all((o == 0).all() for o in narrow)  # refused before anything was written


@each_field
@pytest.mark.parametrize(("chunk", "product_chunk"), [(8, 4), (16, 16), (64, 8)])
def test_synthesis_steps_do_not_change_what_is_written(
    field: PrimeField, monkeypatch: pytest.MonkeyPatch, chunk: int, product_chunk: int
) -> None:
    expected = synthesize(seed=3, index=5, log_n=9, field=field)
    monkeypatch.setattr(synthesis_module, "SYNTHESIS_CHUNK", chunk)
    # Buffers of product_chunk elements each: c is made product_chunk elements at a time.
    monkeypatch.setattr(synthesis_module, "_PRODUCT_BYTES", product_chunk * 8 * field.MUL_BUFFERS)
    a, b, c = synthesize(seed=3, index=5, log_n=9, field=field)
    assert all((x == e).all() for x, e in zip((a, b, c), expected, strict=True))
    ints = a.tolist()
    assert b.tolist() == ints[1:] + ints[:1]
    assert c.tolist() == [x * y % field.P for x, y in zip(ints, ints[1:] + ints[:1], strict=True)]


@each_field
@pytest.mark.parametrize("step", [2, 8, 64, 1 << 20])
def test_a_threaded_step_writes_the_same_values(field: PrimeField, step: int) -> None:
    expected = synthesize(seed=6, index=2, log_n=9, field=field)
    out = tuple(np.zeros(1 << 9, dtype=field.storage) for _ in range(3))
    synthesize_into(6, 2, out, step=step, field=field)
    assert all((o == e).all() for o, e in zip(out, expected, strict=True))


@each_field
@pytest.mark.parametrize("step", [0, 1, 3, 96])
def test_a_step_that_is_not_a_power_of_two_is_refused(field: PrimeField, step: int) -> None:
    out = tuple(np.zeros(64, dtype=field.storage) for _ in range(3))
    with pytest.raises(ValueError, match=f"step must be a power of two of at least 2, got {step}"):
        synthesize_into(1, 0, out, step=step, field=field)


@each_field
def test_synthesize_draws_spread_over_the_field_and_b_is_a_rotated(field: PrimeField) -> None:
    a, b, _ = synthesize(seed=1, index=0, log_n=16, field=field)
    assert int(a.max()) < field.P
    width = np.uint64(-(-field.P // 16))  # 16 equal ranges of [0, p); exact in uint64
    counts = np.bincount(a // width, minlength=16)
    assert counts.size == 16
    assert counts.min() > 0.5 * counts.mean()  # no empty or starved region
    assert len(np.unique(a)) > 0.99 * a.size
    assert (b == np.roll(a, -1)).all()


@pytest.mark.parametrize(
    ("field", "out", "message"),
    [
        pytest.param(
            BABYBEAR,
            (np.zeros(8, np.uint32), np.zeros(8, np.uint32), np.zeros(4, np.uint32)),
            r"^out c must be a uint32 or uint64 vector of 2\^3 elements, got uint32 \(4,\)$",
            id="babybear-length",
        ),
        pytest.param(
            BABYBEAR,
            (np.zeros(8, np.int64), np.zeros(8, np.uint32), np.zeros(8, np.uint32)),
            r"^out a must be a uint32 or uint64 vector of 2\^3 elements, got int64 \(8,\)$",
            id="babybear-dtype",
        ),
        pytest.param(
            GOLDILOCKS,
            (np.zeros(8, np.uint64), np.zeros(8, np.uint64), np.zeros(4, np.uint64)),
            r"^out c must be a uint64 vector of 2\^3 elements, got uint64 \(4,\)$",
            id="goldilocks-length",
        ),
        pytest.param(
            GOLDILOCKS,
            (np.zeros(8, np.uint64), np.zeros(8, np.uint32), np.zeros(8, np.uint64)),
            r"^out b must be a uint64 vector of 2\^3 elements, got uint32 \(8,\)$",
            id="goldilocks-dtype",
        ),
        pytest.param(
            GOLDILOCKS,
            (np.zeros(8, np.int64), np.zeros(8, np.uint64), np.zeros(8, np.uint64)),
            r"^out a must be a uint64 vector of 2\^3 elements, got int64 \(8,\)$",
            id="goldilocks-signed",
        ),
    ],
)
def test_synthesize_into_refuses_bad_buffers(field: PrimeField, out: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        synthesize_into(1, 0, out, field=field)


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
            r"values length must be at most 2\^27 \(babybear's two-adicity\), got 2\^28",
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
            r"log_n must be between 0 and 27 \(babybear's two-adicity\), got 28",
            id="synthesize-log-n",
        ),
        pytest.param(
            lambda: synthesize(seed=-1, index=0, log_n=3),
            "seed must be non-negative, got -1",
            id="synthesize-seed",
        ),
        pytest.param(
            lambda: synthesize(seed=0, index=-2, log_n=3),
            "index must be non-negative, got -2",
            id="synthesize-index",
        ),
        pytest.param(
            lambda: HSteps(log_n=-1),
            r"log_n must be between 0 and 27 \(babybear's two-adicity\), got -1",
            id="steps-log-n",
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
        # Goldilocks: its own limits and p in the messages.
        pytest.param(
            lambda: ntt(np.broadcast_to(np.uint64(0), (1 << 33,)), field=GOLDILOCKS),
            r"^values length must be at most 2\^32 \(goldilocks's two-adicity\), got 2\^33$",
            id="goldilocks-ntt-too-long",
        ),
        pytest.param(
            lambda: coset_intt(np.broadcast_to(np.uint64(0), (1 << 33,)), field=GOLDILOCKS),
            r"^evals length must be at most 2\^32 \(goldilocks's two-adicity\), got 2\^33$",
            id="goldilocks-coset-intt-too-long",
        ),
        pytest.param(
            lambda: ntt(np.array([0, GP], dtype=np.uint64), field=GOLDILOCKS),
            rf"field elements must be in \[0, {GP}\), got {GP} at index \[1\]",
            id="goldilocks-ntt-out-of-range",
        ),
        pytest.param(
            lambda: ntt(np.array([2**64 - 1, 0], dtype=np.uint64), field=GOLDILOCKS),
            rf"field elements must be in \[0, {GP}\), got {2**64 - 1} at index \[0\]",
            id="goldilocks-ntt-all-ones",
        ),
        pytest.param(
            lambda: coset_ntt([1, 2], shift=0, field=GOLDILOCKS),
            rf"^shift must be a nonzero field element in \[1, {GP}\), got 0$",
            id="goldilocks-coset-shift-zero",
        ),
        pytest.param(
            lambda: coset_ntt([1, 2], shift=GP, field=GOLDILOCKS),
            rf"^shift must be a nonzero field element in \[1, {GP}\), got {GP}$",
            id="goldilocks-coset-shift-too-large",
        ),
        pytest.param(
            lambda: synthesize(seed=0, index=0, log_n=33, field=GOLDILOCKS),
            r"^log_n must be between 0 and 32 \(goldilocks's two-adicity\), got 33$",
            id="goldilocks-synthesize-log-n",
        ),
        pytest.param(
            lambda: HSteps(33, GOLDILOCKS),
            r"^log_n must be between 0 and 32 \(goldilocks's two-adicity\), got 33$",
            id="goldilocks-steps-log-n",
        ),
        pytest.param(
            lambda: verify([1, 2], [1, 2], [1, 4], [0, 0], r=GP - 1, field=GOLDILOCKS),
            rf"^r must be a field element outside the domain \(r\^n ≠ 1\), got {GP - 1}$",
            id="goldilocks-verify-r-in-domain",
        ),
        pytest.param(
            lambda: verify([1, 2], [1, 2], [1, 4], [0, 0], r=GP, field=GOLDILOCKS),
            rf"^r must be a field element outside the domain \(r\^n ≠ 1\), got {GP}$",
            id="goldilocks-verify-r-out-of-range",
        ),
        pytest.param(
            lambda: digest(np.array([GP], dtype=np.uint64), field=GOLDILOCKS),
            rf"field elements must be in \[0, {GP}\), got {GP} at index \[0\]",
            id="goldilocks-digest-out-of-range",
        ),
    ],
)
def test_invalid_input_raises_with_the_rule(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_babybear_refuses_what_goldilocks_accepts() -> None:
    # Past BabyBear's p but within Goldilocks': the range checks are the field's own.
    values = [P, 2**32 - 1]
    assert GOLDILOCKS.to_ints(intt(ntt(values, field=GOLDILOCKS), field=GOLDILOCKS)) == values
    with pytest.raises(ValueError, match=r"field elements must be in \[0, 2013265921\)"):
        ntt(values)
    a, b, c = [1, 2], [1, 2], [1, 4]
    assert verify(a, b, c, compute_h(a, b, c, field=GOLDILOCKS), r=P, field=GOLDILOCKS)
    with pytest.raises(ValueError, match=r"r must be a field element outside the domain"):
        verify(a, b, c, compute_h(a, b, c), r=P)


def test_goldilocks_transforms_take_python_ints_past_2_to_the_63() -> None:
    values = [GP - 1, 5]  # numpy alone would make float64 of this list
    assert GOLDILOCKS.to_ints(GOLDILOCKS.to_field(values)) == values
    assert GOLDILOCKS.to_ints(ntt(values, field=GOLDILOCKS)) == [4, GP - 6]
