"""BabyBear arithmetic against Python's exact integers."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu import field
from gpu.field import GENERATOR, TWO_ADICITY, FieldArray, P

elements = st.integers(0, P - 1)
nonzero = st.integers(1, P - 1)


def same_length(count: int) -> st.SearchStrategy[tuple[list[int], list[int], list[int]]]:
    vector = st.lists(elements, min_size=count, max_size=count)
    return st.tuples(vector, vector, vector)


triples = st.integers(1, 16).flatmap(same_length)
# Each example checks a whole vector, so fewer examples than hypothesis's 100 cover as much.
laws = settings(max_examples=40, deadline=None)


def arrays(*vectors: list[int]) -> list[FieldArray]:
    return [np.array(v, dtype=np.uint64) for v in vectors]


def test_constants_describe_babybear() -> None:
    assert P == 2013265921 == 15 * 2**TWO_ADICITY + 1
    assert (P - 1) >> TWO_ADICITY == 15


@pytest.mark.parametrize("factor", [2, 3, 5], ids=lambda q: f"q={q}")
def test_generator_is_not_a_power_of_any_prime_factor(factor: int) -> None:
    assert pow(GENERATOR, (P - 1) // factor, P) != 1


@laws
@given(triples)
def test_add_sub_mul_match_python_integers(xyz: tuple[list[int], list[int], list[int]]) -> None:
    x, y, _ = xyz
    a, b = arrays(x, y)
    assert field.to_ints(field.add(a, b)) == [(i + j) % P for i, j in zip(x, y, strict=True)]
    assert field.to_ints(field.sub(a, b)) == [(i - j) % P for i, j in zip(x, y, strict=True)]
    assert field.to_ints(field.mul(a, b)) == [(i * j) % P for i, j in zip(x, y, strict=True)]


@laws
@given(triples)
def test_add_and_mul_are_associative(xyz: tuple[list[int], list[int], list[int]]) -> None:
    a, b, c = arrays(*xyz)
    assert (field.add(field.add(a, b), c) == field.add(a, field.add(b, c))).all()
    assert (field.mul(field.mul(a, b), c) == field.mul(a, field.mul(b, c))).all()


@laws
@given(triples)
def test_add_and_mul_are_commutative(xyz: tuple[list[int], list[int], list[int]]) -> None:
    a, b, _ = arrays(*xyz)
    assert (field.add(a, b) == field.add(b, a)).all()
    assert (field.mul(a, b) == field.mul(b, a)).all()


@laws
@given(triples)
def test_mul_distributes_over_add_and_sub(xyz: tuple[list[int], list[int], list[int]]) -> None:
    a, b, c = arrays(*xyz)
    assert (field.mul(a, field.add(b, c)) == field.add(field.mul(a, b), field.mul(a, c))).all()
    assert (field.mul(a, field.sub(b, c)) == field.sub(field.mul(a, b), field.mul(a, c))).all()


@laws
@given(triples)
def test_sub_undoes_add(xyz: tuple[list[int], list[int], list[int]]) -> None:
    a, b, _ = arrays(*xyz)
    assert (field.sub(field.add(a, b), b) == a).all()


@laws
@given(nonzero)
def test_inverse_times_value_is_one(x: int) -> None:
    assert x * field.inverse(x) % P == 1


@laws
@given(st.lists(nonzero, min_size=1, max_size=32))
def test_batch_inverse_matches_scalar_inverse(x: list[int]) -> None:
    assert field.to_ints(field.batch_inverse(*arrays(x))) == [field.inverse(v) for v in x]


# Past 64 elements batch_inverse works on a matrix and recurses on its column totals; these
# sizes leave partial last rows and need one, two and several levels.
@pytest.mark.parametrize("shape", [(65,), (1000,), (4097,), (70_001,), (3, 700)], ids=str)
def test_batch_inverse_of_long_arrays_multiplies_back_to_one(shape: tuple[int, ...]) -> None:
    values = np.random.default_rng(len(shape)).integers(1, P, shape, dtype=np.uint64)
    inverses = field.batch_inverse(values)
    assert inverses.shape == shape
    assert (field.mul(values, inverses) == 1).all()
    assert int(inverses.flat[-1]) == field.inverse(int(values.flat[-1]))


@laws
@given(nonzero, st.integers(-(2**40), 2**40))
def test_pow_matches_python(base: int, exponent: int) -> None:
    assert field.pow(base, exponent) == pow(base, exponent, P)


@laws
@given(nonzero)
def test_pow_to_p_minus_one_is_one(x: int) -> None:
    assert field.pow(x, P - 1) == 1


@pytest.mark.parametrize("log_n", range(TWO_ADICITY + 1), ids=lambda k: f"2^{k}")
def test_root_of_unity_has_order_exactly_2_to_the_k(log_n: int) -> None:
    root = field.root_of_unity(log_n)
    assert pow(root, 2**log_n, P) == 1
    if log_n:
        assert pow(root, 2 ** (log_n - 1), P) == P - 1


@pytest.mark.parametrize("count", [0, 1, 2, 5, 16, 33])
def test_powers_lists_consecutive_powers(count: int) -> None:
    assert field.to_ints(field.powers(12345, count)) == [pow(12345, i, P) for i in range(count)]


@laws
@given(st.lists(elements, max_size=16))
def test_le_bytes_round_trip(x: list[int]) -> None:
    data = field.to_le_bytes(x)
    assert len(data) == 4 * len(x)
    assert field.to_ints(field.from_le_bytes(data)) == x


def test_reduce_maps_any_integers_into_the_field() -> None:
    assert field.to_ints(field.reduce([-1, 0, P, P + 5, -P])) == [P - 1, 0, 0, 5, 0]
    assert field.to_ints(field.reduce(np.array([2**64 - 1], dtype=np.uint64))) == [(2**64 - 1) % P]


def test_to_field_returns_uint64_without_copying_uint64_input() -> None:
    values = np.array([0, 1, P - 1], dtype=np.uint64)
    assert field.to_field(values) is values
    assert field.to_field([1, 2]).dtype == np.uint64


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(lambda: field.inverse(0), "0 has no inverse", id="inverse-zero"),
        pytest.param(
            lambda: field.batch_inverse(np.array([3, 0], dtype=np.uint64)),
            r"0 has no inverse; values\[1\] is 0",
            id="batch-inverse-zero",
        ),
        pytest.param(lambda: field.pow(0, -1), "0 has no inverse", id="pow-zero-negative"),
        pytest.param(
            lambda: field.pow(P, 2),
            r"base must be a field element in \[0, 2013265921\), got 2013265921",
            id="pow-base-out-of-range",
        ),
        pytest.param(
            lambda: field.root_of_unity(30),
            "log_n must be between 0 and 27, got 30",
            id="root-too-large",
        ),
        pytest.param(
            lambda: field.root_of_unity(-1),
            "log_n must be between 0 and 27, got -1",
            id="root-negative",
        ),
        pytest.param(
            lambda: field.to_field([1, P]),
            r"field elements must be in \[0, 2013265921\), got 2013265921 at index \[1\]",
            id="to-field-too-large",
        ),
        pytest.param(
            lambda: field.to_field([[0, -3]]),
            r"field elements must be in \[0, 2013265921\), got -3 at index \[0, 1\]",
            id="to-field-negative",
        ),
        pytest.param(
            lambda: field.to_field([1.5]),
            "field elements must be integers in .*, got dtype float64",
            id="to-field-float",
        ),
        pytest.param(
            lambda: field.from_le_bytes(b"\x01\x00\x00"),
            "byte length must be a multiple of 4, got 3",
            id="bytes-length",
        ),
        pytest.param(
            lambda: field.from_le_bytes(b"\xff\xff\xff\xff"),
            "field elements must be in",
            id="bytes-out-of-range",
        ),
        pytest.param(
            lambda: field.powers(2, -1), "count must be non-negative, got -1", id="powers-count"
        ),
    ],
)
def test_invalid_input_raises_with_the_rule(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
