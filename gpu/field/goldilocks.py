"""The Goldilocks field, p = 2^64 − 2^32 + 1: elements fill a uint64, domains reach 2^32.

NumPy has no 128-bit product. `Goldilocks.mul_into` forms it from four 32×32-bit partial
products, then reduces with 2^64 ≡ 2^32 − 1 and 2^96 ≡ −1 (mod p). On the device,
``__umul64hi`` gives the high half. Elements are twice BabyBear's size; 2^27 points of a, b and
c take 3 GiB.

>>> F = GOLDILOCKS
>>> F.to_ints(F.mul(F.to_field([F.P - 1, 2**63]), F.to_field([F.P - 1, 2])))
[1, 4294967295]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from gpu.field.prime import FieldArray, PrimeField

__all__ = ["GOLDILOCKS", "Goldilocks"]

_P = np.uint64(2**64 - 2**32 + 1)
_EPSILON = np.uint64(2**32 - 1)
"""2^64 mod p: a carry out of 64 bits is worth this much, a borrow this much less."""
_LOW_32 = np.uint64(2**32 - 1)
_32 = np.uint64(32)


class Goldilocks(PrimeField):
    """p = 2^64 − 2^32 + 1; generator 7; two-adicity 32."""

    name = "goldilocks"
    P = int(_P)
    GENERATOR = 7
    TWO_ADICITY = 32
    storage = np.dtype(np.uint64)
    MUL_BUFFERS = 5
    CONSECUTIVE_BUFFERS = 6
    CUDA = r"""
#define FIELD_EPSILON 0xffffffffull  /* 2^64 mod p */

static __device__ __forceinline__ elem fmul(elem a, elem b) {
    const u64 lo = a * b, hi = __umul64hi(a, b);
    const u64 h0 = hi & FIELD_EPSILON, h1 = hi >> 32;
    u64 t = lo - h1;                      /* h1·2^96 ≡ −h1 */
    if (lo < h1) t -= FIELD_EPSILON;      /* the borrow of 2^64 is worth 2^32 − 1 less */
    const u64 m = h0 * FIELD_EPSILON;     /* h0·2^64 ≡ h0·(2^32 − 1) */
    u64 r = t + m;
    if (r < m) r += FIELD_EPSILON;        /* a carry of 2^64 */
    return r >= FIELD_P ? r - FIELD_P : r;
}

static __device__ __forceinline__ elem fadd(elem a, elem b) {
    u64 s = a + b;
    if (s < a) return s + FIELD_EPSILON;  /* carried past 2^64; the sum is then below p */
    return s >= FIELD_P ? s - FIELD_P : s;
}

static __device__ __forceinline__ elem fsub(elem a, elem b) {
    const u64 d = a - b;
    return a >= b ? d : d - FIELD_EPSILON;  /* wrapped: + p ≡ − (2^32 − 1) mod 2^64 */
}
"""

    def add(self, a: FieldArray, b: FieldArray | np.uint64) -> FieldArray:
        total = np.add(a, b)
        carry = np.less(total, a)
        np.add(total, _EPSILON, out=total, where=carry)
        return _canonical(total, total)

    def sub(self, a: FieldArray, b: FieldArray | np.uint64) -> FieldArray:
        difference = np.subtract(a, b)
        borrow = np.less(a, b)
        np.subtract(difference, _EPSILON, out=difference, where=borrow)
        return difference

    def mul(self, a: FieldArray, b: FieldArray | np.uint64) -> FieldArray:
        a_, b_ = np.broadcast_arrays(np.asarray(a, dtype=np.uint64), np.asarray(b, np.uint64))
        out = np.empty(a_.shape, dtype=np.uint64)
        buffers = tuple(np.empty(a_.shape, dtype=np.uint64) for _ in range(self.MUL_BUFFERS))
        self.mul_into(a_, b_, out, buffers)
        return out

    def mul_into(
        self,
        a: FieldArray,
        b: FieldArray,
        out: npt.NDArray[Any],
        buffers: tuple[FieldArray, ...],
    ) -> None:
        shape = np.shape(a)
        size = int(np.prod(shape))
        a0, a1, b0, b1, mid = (buffer.reshape(-1)[:size].reshape(shape) for buffer in buffers)
        np.bitwise_and(a, _LOW_32, out=a0)  # a = a1·2^32 + a0, b likewise
        np.right_shift(a, _32, out=a1)
        np.bitwise_and(b, _LOW_32, out=b0)
        np.right_shift(b, _32, out=b1)
        np.multiply(a0, b1, out=mid)
        np.multiply(a0, b0, out=a0)
        np.multiply(a1, b0, out=b0)
        np.multiply(a1, b1, out=a1)
        _reduce_partials(a0, mid, b0, a1, b1, out)

    def consecutive_products(
        self, window: FieldArray, out: npt.NDArray[Any], buffers: tuple[FieldArray, ...]
    ) -> None:
        """Products of neighbours, splitting each element's 32-bit halves only once."""
        size = out.size
        low, high, t, v, w, u = (buffer[: size + 1] for buffer in buffers)
        np.bitwise_and(window, _LOW_32, out=low)
        np.right_shift(window, _32, out=high)
        t, v, w, u = t[:size], v[:size], w[:size], u[:size]
        np.multiply(low[:-1], low[1:], out=t)
        np.multiply(low[:-1], high[1:], out=v)
        np.multiply(high[:-1], low[1:], out=w)
        np.multiply(high[:-1], high[1:], out=u)
        _reduce_partials(t, v, w, u, low[:size], out)

    def random_elements(self, bits: np.random.BitGenerator, out: npt.NDArray[Any]) -> None:
        """64 random bits per element, less p when they reach it (all but uniform)."""
        words = bits.random_raw(out.size)
        if words.size and words.max() >= _P:  # about one draw in 2^32: checked, not computed
            _canonical(words, out, scratch=out)
        else:
            out[...] = words


def _reduce_partials(
    t: FieldArray, v: FieldArray, w: FieldArray, u: FieldArray, scratch: FieldArray, out: Any
) -> None:
    """Set out = x mod p, where x is a·b given by its 32-bit partials t, v, w, u.

    With a = a1·2^32 + a0 and b = b1·2^32 + b0: t = a0·b0, v = a0·b1, w = a1·b0, u = a1·b1.
    Overwrites all five inputs; ``out`` may be any of them.

    With 2^64 ≡ 2^32 − 1 = ε and 2^96 ≡ −1 (mod p), a carry out of v + w is worth −1. The rest is
    hi·2^64 + lo, and hi = h1·2^32 + h0 gives x ≡ lo + h0·ε − h1 − carries.
    """
    np.add(v, w, out=v)  # mid = a0·b1 + a1·b0, mod 2^64
    np.less(v, w, out=scratch)  # its carry, worth −1
    np.left_shift(v, _32, out=w)
    np.right_shift(v, _32, out=v)
    np.add(u, v, out=u)
    np.add(t, w, out=t)  # lo = a0·b0 + (mid mod 2^32)·2^32, mod 2^64
    np.less(t, w, out=v)  # its carry
    np.add(u, v, out=u)  # hi = a1·b1 + mid / 2^32 + that carry
    np.right_shift(u, _32, out=v)  # h1
    np.bitwise_and(u, _LOW_32, out=u)  # h0
    np.multiply(u, _EPSILON, out=u)  # h0·ε < 2^64
    np.add(t, u, out=t)
    np.less(t, u, out=w)  # a carry out, worth ε; adding it cannot carry again
    np.multiply(w, _EPSILON, out=w)
    np.add(t, w, out=t)
    np.add(v, scratch, out=v)  # h1 + mid's carry ≤ 2^32
    np.less(t, v, out=w)  # a borrow, worth −ε; t ≥ 2^64 − 2^32 after it, so no second
    np.subtract(t, v, out=t)
    np.multiply(w, _EPSILON, out=w)
    np.subtract(t, w, out=t)
    _canonical(t, out, scratch=v)


def _canonical(
    values: FieldArray, out: npt.NDArray[Any], scratch: FieldArray | None = None
) -> npt.NDArray[Any]:
    """Bring any uint64 into [0, p) by taking the smaller of ``values`` and ``values − p``."""
    over = np.subtract(values, _P, out=scratch)
    result: npt.NDArray[Any] = np.minimum(values, over, out=out)
    return result


GOLDILOCKS = Goldilocks()
"""The one Goldilocks instance."""
