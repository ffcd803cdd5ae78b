"""The CPU backends of the ntt workload's synthesis and verification: "numpy" and "numba".

`CPU_BACKENDS` names them. "numpy" is whole-array NumPy calls (`gpu.reference.synthesis`,
`gpu.reference.verification`). "numba" is the same work compiled by Numba, here
(docs/decisions/gpu.md, D100).

The compiled draws step SFC64 on the state NumPy gives ``SFC64([seed, index])``. So the outputs
equal the NumPy path's bit for bit. The kernels release the GIL. Verification sums and runs of
powers (`powers`) compile the same way.

Numba is optional (``pip install 'pacer[fast]'``). Kernels compile on first use and are cached
on disk (``NUMBA_CACHE_DIR``, else beside this module or in the user's cache). `warm` compiles
them up front.
"""

from __future__ import annotations

import builtins
import functools
import importlib.util
import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu.field.prime import PrimeField

__all__ = [
    "CPU_BACKENDS",
    "VERIFY_BLOCK",
    "barycentric_sums",
    "check",
    "consecutive_products",
    "evaluate",
    "numba_available",
    "powers",
    "synthesize_into",
    "warm",
]

CPU_BACKENDS = ("numpy", "numba")
"""How synthesis and verification compute: whole-array NumPy calls, or compiled by Numba."""

_Kernel = Callable[..., Any]
POWER_THREADS = max(1, min(16, os.cpu_count() or 1))
"""Threads `powers` splits a long run over."""

logger = logging.getLogger("gpu.reference.cpu_backend")


@functools.cache
def numba_available() -> bool:
    """Whether Numba is installed here; found, not imported, because importing it is slow."""
    return importlib.util.find_spec("numba") is not None


def check(backend: str) -> None:
    """Raise ValueError unless ``backend`` is known; RuntimeError if Numba is missing."""
    if backend not in CPU_BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(CPU_BACKENDS)}, got {backend!r}")
    if backend == "numba" and not numba_available():
        raise RuntimeError("backend 'numba' needs Numba: pip install 'pacer[fast]'")


def synthesize_into(
    seed: int, index: int, out: Sequence[npt.NDArray[Any]], field: PrimeField
) -> None:
    """Write partition (seed, index) of ``field`` into ``out`` (a, b, c), compiled.

    Same values as `gpu.reference.synthesis.synthesize_into`. The caller checks the arguments.
    """
    state = np.random.SFC64([seed, index]).state["state"]["state"].astype(np.uint64)
    a_out, b_out, c_out = out
    _kernels()[field.name](state, a_out, b_out, c_out)


def consecutive_products(
    window: npt.NDArray[np.uint64], out: npt.NDArray[Any], field: PrimeField
) -> None:
    """out[i] = window[i]·window[i + 1] mod p, compiled, as `PrimeField.consecutive_products`."""
    _kernels()[f"{field.name} products"](window, out)


def barycentric_sums(r: int, log_n: int, field: PrimeField, *evals: npt.NDArray[Any]) -> list[int]:
    """Σ_i v_i·ω^i / (r − ω^i) mod p for each of three vectors v on <ω>, compiled.

    Same values as `gpu.reference.verification`. Weights are inverted in blocks of
    `VERIFY_BLOCK`. r must lie outside <ω>.
    """
    omega_inverse = field.inverse(field.root_of_unity(log_n))
    sums = np.zeros(3, dtype=np.uint64)
    _kernels()[f"{field.name} barycentric"](np.uint64(r), np.uint64(omega_inverse), *evals, sums)
    return [int(s) for s in sums]


def evaluate(coeffs: npt.NDArray[Any], x: int, field: PrimeField) -> int:
    """Σ_i coeffs_i·x^i mod p, by Horner's rule."""
    return int(_kernels()[f"{field.name} evaluate"](coeffs, np.uint64(x)))


def powers(
    base: int, count: int, field: PrimeField, first: int = 1, threads: int = POWER_THREADS
) -> npt.NDArray[np.uint64]:
    """[first, first·base, first·base², …] mod p, ``count`` of them, as uint64.

    Runs on ``threads`` threads. Same values as ``field.mul(field.powers(base, count), first)``.
    Inputs must be canonical.
    """
    out = np.empty(count, dtype=np.uint64)
    if count == 0:
        return out
    run = _kernels()[f"{field.name} powers"]
    step = -(-count // max(1, threads))
    starts = range(0, count, step)

    def fill(start: int) -> None:
        begin = int(first) * builtins.pow(base, start, field.P) % field.P
        run(np.uint64(begin), np.uint64(base), out[start : start + step])

    with ThreadPoolExecutor(len(starts), thread_name_prefix="powers") as pool:
        list(pool.map(fill, starts))
    return out


VERIFY_BLOCK = 1 << 10
"""Weights `barycentric_sums` inverts with one exponentiation (two buffers of it, in L1)."""


def warm(
    field: PrimeField, dtypes: Sequence[np.dtype[Any]] = (), *, verification: bool = False
) -> None:
    """Compile or load ``field``'s kernels now, so the first partition does not wait.

    Synthesis kernels are built for each of ``dtypes`` (default: the storage dtype). With
    ``verification``, the uint64 verification kernels too.
    """
    for dtype in dtypes or (field.storage,):
        tiny = [np.zeros(2, dtype=dtype) for _ in range(3)]
        synthesize_into(0, 0, tiny, field)
    if verification:
        vectors = [np.zeros(2, dtype=np.uint64) for _ in range(3)]
        barycentric_sums(2, 1, field, *vectors)
        evaluate(vectors[0], 2, field)


@functools.cache
def _kernels() -> dict[str, _Kernel]:
    """The kernels by field name and purpose, defined on first use so import skips Numba."""
    import numba

    u64 = np.uint64
    low_32 = u64(0xFFFFFFFF)  # also 2^64 mod p for Goldilocks
    shift_32, shift_63 = u64(32), u64(63)
    shift_11, shift_3, shift_24, shift_40 = u64(11), u64(3), u64(24), u64(40)
    one, zero = u64(1), u64(0)
    goldilocks_p = u64(0xFFFFFFFF00000001)
    babybear_p = u64(15 * 2**27 + 1)
    low_31 = u64(0x7FFFFFFF)
    inline = numba.njit(inline="always")
    cache = True  # until Numba finds no writable place: then said once, not per kernel

    def kernel(function: _Kernel) -> _Kernel:
        """``function`` compiled, cached on disk where Numba finds a writable place."""
        nonlocal cache
        if cache:
            try:
                return numba.njit(cache=True, nogil=True, boundscheck=False)(function)
            except RuntimeError as exc:  # no writable cache directory: compile in every process
                cache = False
                logger.warning("synthesis kernels compile without a disk cache (set "
                               "NUMBA_CACHE_DIR to a writable directory): %s", exc)  # fmt: skip
        return numba.njit(nogil=True, boundscheck=False)(function)

    @inline
    def carry(a: Any, b: Any, total: Any) -> Any:
        """1 where a + b wrapped past 2^64, else 0, from the top bits; no compare, so no branch."""
        return ((a & b) | ((a | b) & ~total)) >> shift_63

    @inline
    def borrow(a: Any, b: Any, difference: Any) -> Any:
        """1 where a − b wrapped below 0, else 0, likewise without a compare."""
        return ((~a & b) | ((~a | b) & difference)) >> shift_63

    @inline
    def goldilocks_mul(a: Any, b: Any) -> Any:
        """a·b mod p from four 32×32-bit partials, reduced as `Goldilocks.mul_into` does."""
        a0, a1, b0, b1 = a & low_32, a >> shift_32, b & low_32, b >> shift_32
        t, v, w, u = a0 * b0, a0 * b1, a1 * b0, a1 * b1
        mid = v + w
        mid_carry = carry(v, w, mid)  # worth 2^96 ≡ −1
        shifted = mid << shift_32
        lo = t + shifted
        hi = u + (mid >> shift_32) + carry(t, shifted, lo)
        spill = (hi & low_32) * low_32  # h0·2^64 ≡ h0·ε
        x = lo + spill
        x += carry(lo, spill, x) * low_32  # a carry of 2^64 ≡ ε; x then stays below 2^64 − ε
        owed = (hi >> shift_32) + mid_carry  # h1·2^96 ≡ −h1
        y = x - owed
        y -= borrow(x, owed, y) * low_32  # a borrow of 2^64 ≡ −ε
        return min(y, y - goldilocks_p)  # below p, y − p wraps above y

    @inline
    def babybear_mul(a: Any, b: Any) -> Any:
        return (u64(a) * u64(b)) % babybear_p

    def make(draws_per_word: int, mul: _Kernel) -> _Kernel:
        """A field's synthesis kernel, drawing ``draws_per_word`` elements per SFC64 word.

        Goldilocks takes 1 (the word, less p at or above p). BabyBear takes 2 (low and high 31 bits,
        each less p at or above p). It multiplies with ``mul``.
        """

        @kernel
        def synthesize(state: Any, a_out: Any, b_out: Any, c_out: Any) -> None:
            s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
            size = a_out.size
            word = zero
            first = previous = zero
            for i in range(size):
                if draws_per_word == 1 or i % 2 == 0:  # SFC64's step, as NumPy's sfc64.h
                    word = s0 + s1 + s3
                    s3 += one
                    s0 = s1 ^ (s1 >> shift_11)
                    s1 = s2 + (s2 << shift_3)
                    s2 = ((s2 << shift_24) | (s2 >> shift_40)) + word
                if draws_per_word == 1:
                    value = min(word, word - goldilocks_p)  # below p, word − p wraps above
                else:
                    value = (word if i % 2 == 0 else word >> shift_32) & low_31
                    value = min(value, value - babybear_p)
                a_out[i] = value
                if i == 0:
                    first = value
                else:  # b_(i−1) = a_i, c_(i−1) = a_(i−1)·a_i
                    b_out[i - 1] = value
                    c_out[i - 1] = mul(previous, value)
                previous = value
            b_out[size - 1] = first
            c_out[size - 1] = mul(previous, first)
            state[0], state[1], state[2], state[3] = s0, s1, s2, s3

        return synthesize

    def products(mul: _Kernel) -> _Kernel:
        @kernel
        def consecutive(window: Any, out: Any) -> None:
            for i in range(out.size):
                out[i] = mul(window[i], window[i + 1])

        return consecutive

    def geometric(mul: _Kernel) -> _Kernel:
        @kernel
        def run(first: Any, ratio: Any, out: Any) -> None:
            value = first
            for i in range(out.size):
                out[i] = value
                value = mul(value, ratio)

        return run

    @inline
    def goldilocks_add(a: Any, b: Any) -> Any:
        total = a + b
        total += carry(a, b, total) * low_32  # past 2^64: + ε; a, b < p, so no carry again
        return min(total, total - goldilocks_p)

    @inline
    def babybear_add(a: Any, b: Any) -> Any:
        total = a + b  # below 2^32
        return min(total, total - babybear_p)

    def verification(mul: _Kernel, add: _Kernel, p: np.uint64) -> tuple[_Kernel, _Kernel]:
        """`barycentric_sums` and `evaluate` over the field of ``mul``, ``add`` and ``p``."""
        inverse_exponent = p - u64(2)
        block = VERIFY_BLOCK

        @inline
        def inverse(value: Any) -> Any:
            result, base, exponent = one, value, inverse_exponent
            while exponent:
                if exponent & one:
                    result = mul(result, base)
                base = mul(base, base)
                exponent >>= one
            return result

        @kernel
        def barycentric(r: Any, omega_inverse: Any, a: Any, b: Any, c: Any, sums: Any) -> None:
            size = a.size
            denominators = np.empty(block, dtype=np.uint64)
            prefixes = np.empty(block, dtype=np.uint64)
            point = r  # r·ω^−i
            sum_a = sum_b = sum_c = zero
            for start in range(0, size, block):
                count = min(block, size - start)
                product = one
                for k in range(count):  # d_k = r·ω^−i − 1, never 0 off the domain
                    denominator = point - one if point else p - one
                    denominators[k] = denominator
                    prefixes[k] = product
                    product = mul(product, denominator)
                    point = mul(point, omega_inverse)
                remaining = inverse(product)  # 1 / (d_0 ⋯ d_(count−1))
                for k in range(count - 1, -1, -1):
                    weight = mul(remaining, prefixes[k])  # 1 / d_k
                    remaining = mul(remaining, denominators[k])
                    i = start + k
                    sum_a = add(sum_a, mul(u64(a[i]), weight))
                    sum_b = add(sum_b, mul(u64(b[i]), weight))
                    sum_c = add(sum_c, mul(u64(c[i]), weight))
            sums[0], sums[1], sums[2] = sum_a, sum_b, sum_c

        @kernel
        def horner(coeffs: Any, x: Any) -> Any:
            total = zero
            for i in range(coeffs.size - 1, -1, -1):
                total = add(mul(total, x), u64(coeffs[i]))
            return total

        return barycentric, horner

    goldilocks_sums, goldilocks_evaluate = verification(
        goldilocks_mul, goldilocks_add, goldilocks_p
    )
    babybear_sums, babybear_evaluate = verification(babybear_mul, babybear_add, babybear_p)
    return {
        "goldilocks": make(1, goldilocks_mul),
        "babybear": make(2, babybear_mul),
        "goldilocks products": products(goldilocks_mul),
        "babybear products": products(babybear_mul),
        "goldilocks powers": geometric(goldilocks_mul),
        "babybear powers": geometric(babybear_mul),
        "goldilocks barycentric": goldilocks_sums,
        "babybear barycentric": babybear_sums,
        "goldilocks evaluate": goldilocks_evaluate,
        "babybear evaluate": babybear_evaluate,
    }
