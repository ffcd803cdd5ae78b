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
import math

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
# batch_inverse: shorter inputs are inverted in plain Python; longer ones as a matrix with rows
# of at least _MIN_ROW_LENGTH elements.
_SCALAR_INVERSE_LIMIT = 64
_MIN_ROW_LENGTH = 2048


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
    """The inverse of every element, by Montgomery's trick: one field inversion for them all.

    The elements are laid out as a matrix of at most √n rows. A pass down the rows keeps each
    column's running product; the column totals are inverted the same way, recursively; a pass
    back up peels each element's inverse off its running product. About three multiplications
    per element, in whole-row numpy calls. Raises if an element is 0.

    >>> to_ints(batch_inverse(to_field([1, 2, P - 1])))
    [1, 1006632961, 2013265920]
    """
    flat = np.ravel(values)
    zeros = np.flatnonzero(flat == 0)
    if zeros.size:
        raise ValueError(f"0 has no inverse; values[{zeros[0]}] is 0")
    return _batch_inverse(flat).reshape(np.shape(values))


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


def _batch_inverse(values: FieldArray) -> FieldArray:
    """`batch_inverse` of a flat array of nonzero elements."""
    size = values.size
    if size <= _SCALAR_INVERSE_LIMIT:
        return np.array(_scalar_batch_inverse(to_ints(values)), dtype=np.uint64)
    # At least _MIN_ROW_LENGTH columns, so each numpy call in the row loops does real work.
    cols = max(math.isqrt(size - 1) + 1, min(_MIN_ROW_LENGTH, size // 2))
    rows = -(-size // cols)
    padded = np.ones(rows * cols, dtype=np.uint64)
    padded[:size] = values
    matrix = padded.reshape(rows, cols)
    # prefix[j] = matrix[0] · … · matrix[j]; each slot is overwritten with the inverses of
    # matrix[j] once the backward pass no longer needs it.
    prefix = np.empty_like(matrix)
    prefix[0] = matrix[0]
    for j in range(1, rows):
        prefix[j] = mul(prefix[j - 1], matrix[j])
    inverse_prefix = _batch_inverse(prefix[-1])
    for j in range(rows - 1, 0, -1):
        prefix[j] = mul(inverse_prefix, prefix[j - 1])
        inverse_prefix = mul(inverse_prefix, matrix[j])
    prefix[0] = inverse_prefix
    return prefix.reshape(rows * cols)[:size]


def _scalar_batch_inverse(values: list[int]) -> list[int]:
    """Montgomery's trick in plain Python ints, for short inputs."""
    running = [1]
    for value in values:
        running.append(running[-1] * value % P)
    inverse_running = builtins.pow(running[-1], -1, P)
    inverses = [0] * len(values)
    for i in range(len(values) - 1, -1, -1):
        inverses[i] = inverse_running * running[i] % P
        inverse_running = inverse_running * values[i] % P
    return inverses
