"""Prime-field arithmetic (BabyBear and Goldilocks) against Python's exact integers."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.field import FIELD_NAMES, by_name
from gpu.field.babybear import BABYBEAR
from gpu.field.goldilocks import GOLDILOCKS
from gpu.field.prime import FieldArray, PrimeField

FIELDS = [by_name(name) for name in FIELD_NAMES]
each_field = pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)

# Any 64-bit value, and a few below 0, taken mod p: hypothesis's favourite edges (0, 2^64 − 1,
# small negatives) become 0, p − 1 and its neighbours, and 2^64 mod p.
raw = st.integers(-8, 2**64 - 1)


def same_length(count: int) -> st.SearchStrategy[tuple[list[int], list[int], list[int]]]:
    vector = st.lists(raw, min_size=count, max_size=count)
    return st.tuples(vector, vector, vector)


triples = st.integers(1, 16).flatmap(same_length)
# Each example checks a whole vector, so fewer examples than hypothesis's 100 cover as much.
laws = settings(max_examples=40, deadline=None)


def elements(field: PrimeField, values: list[int]) -> list[int]:
    return [x % field.P for x in values]


def arrays(field: PrimeField, *vectors: list[int]) -> list[FieldArray]:
    return [np.array(elements(field, v), dtype=np.uint64) for v in vectors]


def nonzero(field: PrimeField, x: int) -> int:
    return x % (field.P - 1) + 1


def test_constants_describe_the_fields() -> None:
    assert BABYBEAR.P == 2013265921 == 15 * 2**BABYBEAR.TWO_ADICITY + 1
    assert GOLDILOCKS.P == 2**64 - 2**32 + 1
    assert (GOLDILOCKS.P - 1) >> GOLDILOCKS.TWO_ADICITY == 2**32 - 1  # odd
    assert BABYBEAR.storage == np.uint32
    assert GOLDILOCKS.storage == np.uint64


@pytest.mark.parametrize(
    ("field", "factor"),
    [(BABYBEAR, q) for q in (2, 3, 5)] + [(GOLDILOCKS, q) for q in (2, 3, 5, 17, 257, 65537)],
    ids=lambda x: getattr(x, "name", f"q={x}"),
)
def test_generator_is_not_a_power_of_any_prime_factor(field: PrimeField, factor: int) -> None:
    assert (field.P - 1) % factor == 0
    assert pow(field.GENERATOR, (field.P - 1) // factor, field.P) != 1


def test_the_listed_factors_are_all_of_p_minus_one() -> None:
    assert BABYBEAR.P - 1 == 2**27 * 3 * 5
    assert GOLDILOCKS.P - 1 == 2**32 * 3 * 5 * 17 * 257 * 65537


@each_field
@laws
@given(xyz=triples)
def test_add_sub_mul_match_python_integers(
    field: PrimeField, xyz: tuple[list[int], list[int], list[int]]
) -> None:
    x, y = elements(field, xyz[0]), elements(field, xyz[1])
    a, b = arrays(field, x, y)
    p = field.P
    assert field.to_ints(field.add(a, b)) == [(i + j) % p for i, j in zip(x, y, strict=True)]
    assert field.to_ints(field.sub(a, b)) == [(i - j) % p for i, j in zip(x, y, strict=True)]
    assert field.to_ints(field.mul(a, b)) == [(i * j) % p for i, j in zip(x, y, strict=True)]
    assert field.to_ints(field.mul(a, np.uint64(y[0]))) == [i * y[0] % p for i in x]


@each_field
@laws
@given(xyz=triples)
def test_mul_into_matches_mul_in_either_dtype(
    field: PrimeField, xyz: tuple[list[int], list[int], list[int]]
) -> None:
    a, b = arrays(field, xyz[0], xyz[1])
    buffers = tuple(np.full(a.size + 3, 7, dtype=np.uint64) for _ in range(field.MUL_BUFFERS))
    for dtype in (field.storage, np.uint64):
        out = np.zeros(a.size, dtype=dtype)
        field.mul_into(a, b, out, buffers)
        assert field.to_ints(out) == field.to_ints(field.mul(a, b))


@each_field
@laws
@given(xyz=triples)
def test_add_and_mul_are_associative(
    field: PrimeField, xyz: tuple[list[int], list[int], list[int]]
) -> None:
    a, b, c = arrays(field, *xyz)
    assert (field.add(field.add(a, b), c) == field.add(a, field.add(b, c))).all()
    assert (field.mul(field.mul(a, b), c) == field.mul(a, field.mul(b, c))).all()


@each_field
@laws
@given(xyz=triples)
def test_mul_distributes_over_add_and_sub(
    field: PrimeField, xyz: tuple[list[int], list[int], list[int]]
) -> None:
    a, b, c = arrays(field, *xyz)
    assert (field.mul(a, field.add(b, c)) == field.add(field.mul(a, b), field.mul(a, c))).all()
    assert (field.mul(a, field.sub(b, c)) == field.sub(field.mul(a, b), field.mul(a, c))).all()
    assert (field.sub(field.add(a, b), b) == a).all()


GOLDILOCKS_CARRIES = [
    (2**64 - 2**32, 2**64 - 2**32),  # p − 1 squared: the largest product
    (2**63, 2),  # exactly 2^64: one carry
    (2**32, 2**32),  # 2^64 again, from the middle partial products
    (2**64 - 2**32, 2**32 - 1),  # a borrow in the reduction
    (0xFFFFFFFF_FFFFFFFF % GOLDILOCKS.P, 0xFFFFFFFF_00000000),
    (0xFFFFFFFE_FFFFFFFF, 0xFFFFFFFE_FFFFFFFF),  # a0·b1 + a1·b0 carries past 2^64
    (0xFFFFFFFE_FFFFFFFF, 0xFFFFFFFF_00000000),  # … and with the largest a1·b1
]
"""Goldilocks factors whose product takes each carry and borrow of the reduction."""


@pytest.mark.parametrize(("a", "b"), GOLDILOCKS_CARRIES, ids=str)
def test_goldilocks_products_at_the_carries(a: int, b: int) -> None:
    field = GOLDILOCKS
    x, y = arrays(field, [a, b, a], [b, a, 1])
    assert field.to_ints(field.mul(x, y)) == [a * b % field.P, a * b % field.P, a % field.P]
    buffers = tuple(np.empty(3, dtype=np.uint64) for _ in range(field.CONSECUTIVE_BUFFERS))
    out = np.empty(2, dtype=np.uint64)
    field.consecutive_products(arrays(field, [a, b, a])[0], out, buffers)
    assert field.to_ints(out) == [a * b % field.P] * 2


@each_field
@laws
@given(x=st.lists(raw, min_size=2, max_size=40), spare=st.integers(0, 3))
def test_consecutive_products_match_python_integers(
    field: PrimeField, x: list[int], spare: int
) -> None:
    window = arrays(field, x)[0]
    values = elements(field, x)
    buffers = tuple(
        np.full(window.size + spare, 7, dtype=np.uint64) for _ in range(field.CONSECUTIVE_BUFFERS)
    )
    for dtype in (field.storage, np.uint64):
        out = np.zeros(window.size - 1, dtype=dtype)
        field.consecutive_products(window, out, buffers)
        assert field.to_ints(out) == [i * j % field.P for i, j in pairwise(values)]


@each_field
@laws
@given(x=raw)
def test_inverse_times_value_is_one(field: PrimeField, x: int) -> None:
    value = nonzero(field, x)
    assert value * field.inverse(value) % field.P == 1


@each_field
@laws
@given(x=st.lists(raw, min_size=1, max_size=32))
def test_batch_inverse_matches_scalar_inverse(field: PrimeField, x: list[int]) -> None:
    values = [nonzero(field, v) for v in x]
    assert field.to_ints(field.batch_inverse(np.array(values, dtype=np.uint64))) == [
        field.inverse(v) for v in values
    ]


# Past 64 elements batch_inverse works on a matrix and recurses on its column totals; these
# sizes leave partial last rows and need one, two and several levels.
@each_field
@pytest.mark.parametrize("shape", [(65,), (1000,), (4097,), (70_001,), (3, 700)], ids=str)
def test_batch_inverse_of_long_arrays_multiplies_back_to_one(
    field: PrimeField, shape: tuple[int, ...]
) -> None:
    rng = np.random.default_rng(len(shape))
    values = field.reduce(rng.integers(1, 2**64 - 1, shape, dtype=np.uint64))
    values[values == 0] = 1
    inverses = field.batch_inverse(values)
    assert inverses.shape == shape
    assert (field.mul(values, inverses) == 1).all()
    assert int(inverses.flat[-1]) == field.inverse(int(values.flat[-1]))


@each_field
@laws
@given(base=raw, exponent=st.integers(-(2**40), 2**40))
def test_pow_matches_python(field: PrimeField, base: int, exponent: int) -> None:
    value = nonzero(field, base)
    assert field.pow(value, exponent) == pow(value, exponent, field.P)
    assert field.pow(value, field.P - 1) == 1


@each_field
def test_root_of_unity_has_order_exactly_2_to_the_k(field: PrimeField) -> None:
    for log_n in range(field.TWO_ADICITY + 1):
        root = field.root_of_unity(log_n)
        assert pow(root, 2**log_n, field.P) == 1
        if log_n:
            assert pow(root, 2 ** (log_n - 1), field.P) == field.P - 1


@each_field
@pytest.mark.parametrize("count", [0, 1, 2, 5, 16, 33])
def test_powers_lists_consecutive_powers(field: PrimeField, count: int) -> None:
    assert field.to_ints(field.powers(12345, count)) == [
        pow(12345, i, field.P) for i in range(count)
    ]


@each_field
@laws
@given(x=st.lists(raw, max_size=16))
def test_le_bytes_round_trip(field: PrimeField, x: list[int]) -> None:
    values = elements(field, x)
    data = field.to_le_bytes(values)
    assert len(data) == field.storage.itemsize * len(x)
    assert field.to_ints(field.from_le_bytes(data)) == values


@each_field
def test_reduce_maps_any_integers_into_the_field(field: PrimeField) -> None:
    p = field.P
    signed = np.array([-1, 0, 5, -(2**63), 2**63 - 1], dtype=np.int64)
    assert field.to_ints(field.reduce(signed)) == [int(v) % p for v in signed]
    unsigned = np.array([2**64 - 1, p - 1, p], dtype=np.uint64)
    assert field.to_ints(field.reduce(unsigned)) == [(2**64 - 1) % p, p - 1, 0]


@each_field
@laws
@given(x=st.lists(raw, max_size=40))
def test_sum_is_exact(field: PrimeField, x: list[int]) -> None:
    values = elements(field, x)
    assert field.sum(np.array(values, dtype=np.uint64)) == sum(values) % field.P


@each_field
def test_random_elements_are_canonical_and_follow_the_stream(field: PrimeField) -> None:
    def draw(seed: int, count: int = 1001) -> FieldArray:
        out = np.full(count, 7, dtype=field.storage)
        field.random_elements(np.random.SFC64(seed), out)
        return out

    first = draw(5)
    assert int(first.max()) < field.P
    assert len(np.unique(first)) > 990
    assert (first == draw(5)).all()
    assert not (first == draw(6)).all()


def test_a_goldilocks_draw_past_p_is_reduced() -> None:
    class AllOnes(np.random.SFC64):
        def random_raw(self, size: Any = None, output: bool = True) -> Any:
            return np.full(size, 2**64 - 1, dtype=np.uint64)

    out = np.zeros(4, dtype=np.uint64)
    GOLDILOCKS.random_elements(AllOnes(), out)
    assert GOLDILOCKS.to_ints(out) == [2**64 - 1 - GOLDILOCKS.P] * 4


@each_field
def test_a_field_pickles_to_the_same_instance(field: PrimeField) -> None:
    assert pickle.loads(pickle.dumps(field)) is field


def test_to_field_returns_uint64_without_copying_uint64_input() -> None:
    values = np.array([0, 1, GOLDILOCKS.P - 1], dtype=np.uint64)
    assert GOLDILOCKS.to_field(values) is values
    assert BABYBEAR.to_field([1, 2]).dtype == np.uint64


def test_by_name_names_the_choices() -> None:
    with pytest.raises(ValueError, match="field must be one of babybear, goldilocks, got 'bn254'"):
        by_name("bn254")


B, G = BABYBEAR, GOLDILOCKS


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(lambda: B.inverse(0), "0 has no inverse", id="inverse-zero"),
        pytest.param(
            lambda: G.batch_inverse(np.array([3, 0], dtype=np.uint64)),
            r"0 has no inverse; values\[1\] is 0",
            id="batch-inverse-zero",
        ),
        pytest.param(lambda: G.pow(0, -1), "0 has no inverse", id="pow-zero-negative"),
        pytest.param(
            lambda: B.pow(B.P, 2),
            r"base must be a field element in \[0, 2013265921\), got 2013265921",
            id="pow-base-out-of-range",
        ),
        pytest.param(
            lambda: B.root_of_unity(30),
            "log_n must be between 0 and 27, got 30",
            id="root-too-large",
        ),
        pytest.param(
            lambda: G.root_of_unity(33),
            "log_n must be between 0 and 32, got 33",
            id="goldilocks-root-too-large",
        ),
        pytest.param(
            lambda: B.root_of_unity(-1),
            "log_n must be between 0 and 27, got -1",
            id="root-negative",
        ),
        pytest.param(
            lambda: B.to_field([1, B.P]),
            r"field elements must be in \[0, 2013265921\), got 2013265921 at index \[1\]",
            id="to-field-too-large",
        ),
        pytest.param(
            lambda: G.to_field(np.array([1, 2**64 - 1], dtype=np.uint64)),
            rf"field elements must be in \[0, {G.P}\), got {2**64 - 1} at index \[1\]",
            id="goldilocks-to-field-too-large",
        ),
        pytest.param(
            lambda: B.to_field([[0, -3]]),
            r"field elements must be in \[0, 2013265921\), got -3 at index \[0, 1\]",
            id="to-field-negative",
        ),
        pytest.param(
            lambda: G.to_field([1.5]),
            "field elements must be integers in .*, got dtype float64",
            id="to-field-float",
        ),
        pytest.param(
            lambda: B.from_le_bytes(b"\x01\x00\x00"),
            "byte length must be a multiple of 4, got 3",
            id="bytes-length",
        ),
        pytest.param(
            lambda: G.from_le_bytes(b"\x01\x00\x00\x00"),
            "byte length must be a multiple of 8, got 4",
            id="goldilocks-bytes-length",
        ),
        pytest.param(
            lambda: B.from_le_bytes(b"\xff\xff\xff\xff"),
            "field elements must be in",
            id="bytes-out-of-range",
        ),
        pytest.param(
            lambda: G.powers(2, -1), "count must be non-negative, got -1", id="powers-count"
        ),
    ],
)
def test_invalid_input_raises_with_the_rule(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
