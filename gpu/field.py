"""Arithmetic in the BabyBear prime field, p = 15·2^27 + 1, vectorized over numpy uint64 arrays.

Arrays hold canonical elements, integers in [0, p), one per uint64. A product of two elements is
below 2^62, so multiplying two arrays in uint64 and reducing is exact. The arithmetic functions
trust their inputs to be canonical (they sit in the NTT's inner loop); the conversion helpers
(`to_field`, `from_le_bytes`) are where outside data is checked.

>>> to_ints(mul(to_field([2, P - 1]), to_field([3, P - 1])))
[6, 1]
"""

from __future__ import annotations

import builtins

import numpy as np
import numpy.typing as npt

__all__ = [
    "GENERATOR",
    "TWO_ADICITY",
    "FieldArray",
    "P",
    "add",
    "batch_inverse",
    "from_le_bytes",
    "inverse",
    "mul",
    "pow",
    "powers",
    "reduce",
    "root_of_unity",
    "sub",
    "to_field",
    "to_ints",
    "to_le_bytes",
]

P = 15 * 2**27 + 1
"""The modulus, 2013265921."""
GENERATOR = 31
"""Generates the multiplicative group, of order p − 1 = 15·2^27."""
TWO_ADICITY = 27
"""The largest k with 2^k dividing p − 1: the longest power-of-two NTT is 2^27."""

FieldArray = npt.NDArray[np.uint64]
"""An array of canonical field elements."""

_P = np.uint64(P)
_RANGE = f"[0, {P})"


def add(a: FieldArray, b: FieldArray | np.uint64) -> FieldArray:
    """(a + b) mod p, elementwise; ``b`` may be one element that broadcasts."""
    total = np.add(a, b)
    return np.minimum(total, total - _P)


def sub(a: FieldArray, b: FieldArray | np.uint64) -> FieldArray:
    """(a − b) mod p, elementwise; ``b`` may be one element that broadcasts."""
    difference = np.subtract(a, b)
    # Where a < b the uint64 difference wrapped past zero; adding p wraps it back into [0, p).
    return np.minimum(difference, difference + _P)


def mul(a: FieldArray, b: FieldArray | np.uint64) -> FieldArray:
    """(a · b) mod p, elementwise; ``b`` may be one element that broadcasts."""
    product = np.multiply(a, b)
    # product − ⌊product / p⌋·p: numpy divides by a scalar with libdivide, which runs about
    # twice as fast as its uint64 remainder.
    quotient = product // _P
    quotient *= _P
    product -= quotient
    return product


def pow(base: int, exponent: int) -> int:
    """base^exponent mod p for one element; a negative exponent raises the inverse.

    >>> pow(GENERATOR, P - 1)
    1
    """
    _check_element("base", base)
    if exponent < 0 and base == 0:
        raise ValueError("0 has no inverse, so it cannot be raised to a negative power")
    return builtins.pow(base, exponent, P)


def inverse(value: int) -> int:
    """The element x with value · x = 1 mod p.

    >>> inverse(2)
    1006632961
    """
    _check_element("value", value)
    if value == 0:
        raise ValueError("0 has no inverse")
    return builtins.pow(value, -1, P)


def batch_inverse(values: FieldArray) -> FieldArray:
    """The inverse of every element, as x^(p−2) by vectorized square-and-multiply.

    Costs about 60 vectorized multiplications whatever the length. Raises if an element is 0.
    """
    zeros = np.flatnonzero(values == 0)
    if zeros.size:
        raise ValueError(f"0 has no inverse; values[{zeros[0]}] is 0")
    result = np.ones_like(values)
    square = values
    exponent = P - 2
    while exponent:
        if exponent & 1:
            result = mul(result, square)
        exponent >>= 1
        if exponent:
            square = mul(square, square)
    return result


def root_of_unity(log_n: int) -> int:
    """A primitive 2^log_n-th root of unity: its powers 0 .. 2^log_n − 1 are distinct.

    >>> root_of_unity(1)
    2013265920
    """
    if not 0 <= log_n <= TWO_ADICITY:
        raise ValueError(f"log_n must be between 0 and {TWO_ADICITY}, got {log_n}")
    return builtins.pow(GENERATOR, (P - 1) >> log_n, P)


def powers(base: int, count: int) -> FieldArray:
    """[1, base, base², …, base^(count−1)] mod p, built by doubling (log2(count) passes).

    >>> to_ints(powers(3, 4))
    [1, 3, 9, 27]
    """
    _check_element("base", base)
    if count < 0:
        raise ValueError(f"count must be non-negative, got {count}")
    result = np.ones(min(count, 1), dtype=np.uint64)
    while result.size < count:
        step = np.uint64(builtins.pow(base, result.size, P))
        result = np.concatenate([result, mul(result[: count - result.size], step)])
    return result


def to_field(values: npt.ArrayLike) -> FieldArray:
    """Canonical elements as a uint64 array; raises unless every value is an integer in [0, p).

    Returns ``values`` itself when it already is a uint64 array.

    >>> to_field([0, 1, P - 1]).dtype
    dtype('uint64')
    """
    array = np.asarray(values)
    if array.size == 0:
        return array.astype(np.uint64)
    if array.dtype.kind not in "iu":
        raise ValueError(f"field elements must be integers in {_RANGE}, got dtype {array.dtype}")
    if array.max() >= P or (array.dtype.kind == "i" and array.min() < 0):
        bad = (array < 0) | (array >= P) if array.dtype.kind == "i" else array >= _P
        index = np.unravel_index(int(np.argmax(bad)), array.shape)
        where = ", ".join(map(str, index))
        raise ValueError(
            f"field elements must be in {_RANGE}, got {array[index]} at index [{where}]"
        )
    return array.astype(np.uint64, copy=False)


def reduce(values: npt.ArrayLike) -> FieldArray:
    """Any integers (signed or unsigned, up to 64 bits) reduced mod p into canonical elements.

    >>> to_ints(reduce([-1, P, P + 5]))
    [2013265920, 0, 5]
    """
    array = np.asarray(values)
    if array.size == 0:
        return array.astype(np.uint64)
    if array.dtype.kind not in "iu":
        raise ValueError(f"only integers can be reduced mod p, got dtype {array.dtype}")
    if array.dtype.kind == "i":
        return np.mod(array.astype(np.int64, copy=False), np.int64(P)).astype(np.uint64)
    return np.mod(array.astype(np.uint64, copy=False), _P)


def to_ints(values: FieldArray) -> list[int]:
    """The elements as Python ints, for exact arithmetic and comparisons in plain Python."""
    return [int(v) for v in np.asarray(values).ravel()]


def to_le_bytes(values: npt.ArrayLike) -> bytes:
    """The canonical encoding: each element as a little-endian uint32, in C order.

    >>> to_le_bytes([1, 256])
    b'\\x01\\x00\\x00\\x00\\x00\\x01\\x00\\x00'
    """
    return to_field(values).astype("<u4").tobytes()


def from_le_bytes(data: bytes) -> FieldArray:
    """The inverse of `to_le_bytes`: little-endian uint32 words, each checked to be below p."""
    if len(data) % 4:
        raise ValueError(f"byte length must be a multiple of 4, got {len(data)}")
    return to_field(np.frombuffer(data, dtype="<u4").astype(np.uint64))


def _check_element(name: str, value: int) -> None:
    if not 0 <= value < P:
        raise ValueError(f"{name} must be a field element in {_RANGE}, got {value}")
