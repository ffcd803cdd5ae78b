"""The BabyBear field, p = 15·2^27 + 1: elements fit 31 bits, a product fits 62.

A product in uint64 is exact, so each operation is a few whole-array NumPy calls. On the device
an element is a uint32. Its largest power-of-two domain is 2^27.

>>> F = BABYBEAR
>>> F.to_ints(F.mul(F.to_field([2, F.P - 1]), F.to_field([3, F.P - 1])))
[6, 1]
>>> F.inverse(2)
1006632961
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from gpu.field.prime import FieldArray, PrimeField

__all__ = ["BABYBEAR", "BabyBear"]

_P = np.uint64(15 * 2**27 + 1)
_P32 = np.uint32(_P)
_LOW_31 = np.uint32(2**31 - 1)


class BabyBear(PrimeField):
    """p = 15·2^27 + 1 = 2013265921; generator 31; two-adicity 27."""

    name = "babybear"
    P = int(_P)
    GENERATOR = 31
    TWO_ADICITY = 27
    storage = np.dtype(np.uint32)
    MUL_BUFFERS = 2
    CONSECUTIVE_BUFFERS = 2
    CUDA = r"""
static __device__ __forceinline__ elem fmul(elem a, elem b) {
    return (elem)(((u64)a * b) % FIELD_P);  /* a constant divisor: a multiply-high sequence */
}

static __device__ __forceinline__ elem fadd(elem a, elem b) {
    elem s = a + b;  /* < 2^32: both are below p < 2^31 */
    return s >= FIELD_P ? s - FIELD_P : s;
}

static __device__ __forceinline__ elem fsub(elem a, elem b) {
    return a >= b ? a - b : a + FIELD_P - b;
}
"""

    def add(self, a: FieldArray, b: FieldArray | np.uint64) -> FieldArray:
        total = np.add(a, b)
        return np.minimum(total, total - _P)

    def sub(self, a: FieldArray, b: FieldArray | np.uint64) -> FieldArray:
        difference = np.subtract(a, b)
        # Where a < b the uint64 difference wrapped past zero; adding p wraps it back into [0, p).
        return np.minimum(difference, difference + _P)

    def mul(self, a: FieldArray, b: FieldArray | np.uint64) -> FieldArray:
        product = np.multiply(a, b)
        _reduce_product(product, np.empty_like(product))
        return product

    def mul_into(
        self,
        a: FieldArray,
        b: FieldArray,
        out: npt.NDArray[Any],
        buffers: tuple[FieldArray, ...],
    ) -> None:
        product, quotient = buffers[0][: a.size], buffers[1][: a.size]
        np.multiply(a, b, out=product)
        _reduce_product(product, quotient)
        out[...] = product

    def random_elements(self, bits: np.random.BitGenerator, out: npt.NDArray[Any]) -> None:
        """31 random bits per element, less p when they exceed it (slightly non-uniform)."""
        count = out.size
        words = bits.random_raw((count + 1) // 2).view(np.uint32)  # two 32-bit words a draw
        np.bitwise_and(words[:count], _LOW_31, out=out)
        over = words[:count]  # the draws are spent: their memory holds values − p
        np.subtract(out, _P32, out=over)
        np.minimum(out, over, out=out)  # values ≥ p wrapped below p; others kept

    def butterflies(
        self,
        low: FieldArray,
        high: FieldArray,
        twiddle: FieldArray,
        product_buffer: FieldArray,
        scratch_buffer: FieldArray,
    ) -> None:
        product = product_buffer.reshape(low.shape)
        scratch = scratch_buffer.reshape(low.shape)
        np.multiply(high, twiddle, out=product)
        _reduce_product(product, scratch)
        # The same reductions as sub and add, written into the buffers.
        np.subtract(low, product, out=high)
        np.add(high, _P, out=scratch)
        np.minimum(high, scratch, out=high)
        np.add(low, product, out=low)
        np.subtract(low, _P, out=scratch)
        np.minimum(low, scratch, out=low)


def _reduce_product(product: FieldArray, quotient: FieldArray) -> None:
    """Reduce ``product`` (below 2^62) mod p in place, with ``quotient`` as scratch.

    Computes product − ⌊product / p⌋·p, which NumPy runs faster than its uint64 remainder.
    """
    np.floor_divide(product, _P, out=quotient)
    np.multiply(quotient, _P, out=quotient)
    np.subtract(product, quotient, out=product)


BABYBEAR = BabyBear()
"""The one BabyBear instance."""
