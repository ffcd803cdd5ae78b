"""The number-theoretic transform over a prime field, and the Groth16 H computation, in NumPy.

This is the CPU reference that `gpu.cuda.ntt` must match bit for bit. The H computation takes
a partition's a, b, c to the coefficients of H = (A·B − C) / Z in four phases (`H_PHASES`,
`HSteps`). `gpu.reference.verification` checks the result.

A transform gathers its input once into bit-reversed order, as a (cols, rows) matrix with
cols ≈ √n. Early stages run on that matrix and later ones on its transpose, so each NumPy call
sweeps long contiguous runs. Twiddle tables are cached per size and field.

Every function takes ``field`` (a `gpu.field.prime.PrimeField`; BabyBear unless given).

>>> from gpu.field.goldilocks import GOLDILOCKS
>>> values = GOLDILOCKS.to_field([1, 2, 3, 4])
>>> GOLDILOCKS.to_ints(intt(ntt(values, field=GOLDILOCKS), field=GOLDILOCKS))
[1, 2, 3, 4]
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from gpu.field.babybear import BABYBEAR
from gpu.field.prime import FieldArray, PrimeField
from gpu.reference import cpu_backend

__all__ = [
    "H_PHASES",
    "HSteps",
    "check_log_n",
    "check_vector",
    "compute_h",
    "coset_intt",
    "coset_ntt",
    "intt",
    "ntt",
]

H_PHASES = ("intt", "coset_ntt", "pointwise", "coset_intt")
"""The phases of the H computation, in order: `HSteps`'s methods, and what a proof times."""
_CACHED_SIZES = 8
_Array = TypeVar("_Array", bound=npt.NDArray[Any])


def ntt(values: npt.ArrayLike, *, field: PrimeField = BABYBEAR) -> FieldArray:
    """Evaluations of the polynomial with coefficients ``values`` on the domain <ω>.

    Output k is Σ_j values[j]·ω^(jk). n must be a power of two up to 2^TWO_ADICITY, and every value
    must be in [0, p).
    """
    array, log_n = check_vector("values", values, field)
    return _transform(array, log_n, field, inverse=False)


def intt(values: npt.ArrayLike, *, field: PrimeField = BABYBEAR) -> FieldArray:
    """The coefficients of the polynomial whose evaluations on <ω> are ``values``; undoes `ntt`."""
    array, log_n = check_vector("values", values, field)
    return _intt(array, log_n, field)


def coset_ntt(
    coeffs: npt.ArrayLike, shift: int | None = None, *, field: PrimeField = BABYBEAR
) -> FieldArray:
    """Evaluations of the polynomial ``coeffs`` on the coset shift·<ω>: output k at shift·ω^k.

    ``shift`` defaults to the field's generator."""
    array, log_n = check_vector("coeffs", coeffs, field)
    shift = _check_shift(shift, field)
    return _coset_ntt(array, log_n, shift, field)


def coset_intt(
    evals: npt.ArrayLike, shift: int | None = None, *, field: PrimeField = BABYBEAR
) -> FieldArray:
    """The coefficients of the polynomial whose evaluations on shift·<ω> are ``evals``."""
    array, log_n = check_vector("evals", evals, field)
    shift = _check_shift(shift, field)
    return _coset_intt(array, log_n, shift, field)


class HSteps:
    """`compute_h` for one size, as its four phases (`H_PHASES`), so a port can time each alike.

    Each step takes the previous step's output; `run` chains them. Tables are built up front.
    The coset is GENERATOR·<ω>, GENERATOR the field's.

    >>> from gpu.reference.synthesis import synthesize
    >>> steps = HSteps(log_n=3)
    >>> a, b, c = synthesize(seed=1, index=0, log_n=3)
    >>> evals = steps.pointwise(*steps.coset_ntt(*steps.intt(a, b, c)))
    >>> bool((steps.coset_intt(evals) == compute_h(a, b, c)).all())
    True
    """

    def __init__(self, log_n: int, field: PrimeField = BABYBEAR) -> None:
        check_log_n(log_n, field, low=0)
        self.field = field
        self.log_n = log_n
        self.n = 1 << log_n
        # Z(x) = x^n − 1 takes this one value on the whole coset GENERATOR·<ω>.
        self.z_on_coset = (field.pow(field.GENERATOR, self.n) - 1) % field.P
        self._z_inverse = np.uint64(field.inverse(self.z_on_coset))
        _plan(log_n, field)
        _coset_scales(log_n, field.GENERATOR, field)

    def intt(
        self, a: npt.ArrayLike, b: npt.ArrayLike, c: npt.ArrayLike
    ) -> tuple[FieldArray, FieldArray, FieldArray]:
        """Checks a, b, c (evaluations on <ω>, length n) and returns their coefficients."""
        a_, b_, c_ = (self._check(name, v) for name, v in (("a", a), ("b", b), ("c", c)))
        log_n, field = self.log_n, self.field
        return _intt(a_, log_n, field), _intt(b_, log_n, field), _intt(c_, log_n, field)

    def coset_ntt(
        self, a: FieldArray, b: FieldArray, c: FieldArray
    ) -> tuple[FieldArray, FieldArray, FieldArray]:
        """Evaluates the three coefficient vectors on the coset GENERATOR·<ω>."""
        log_n, field = self.log_n, self.field
        return (
            _coset_ntt(a, log_n, field.GENERATOR, field),
            _coset_ntt(b, log_n, field.GENERATOR, field),
            _coset_ntt(c, log_n, field.GENERATOR, field),
        )

    def pointwise(self, a: FieldArray, b: FieldArray, c: FieldArray) -> FieldArray:
        """H on the coset: (a·b − c) / Z, with Z = GENERATOR^n − 1 there."""
        field = self.field
        return field.mul(field.sub(field.mul(a, b), c), self._z_inverse)

    def coset_intt(self, h_evals: FieldArray) -> FieldArray:
        """H's n coefficients from its evaluations on the coset; the last one is 0."""
        return _coset_intt(h_evals, self.log_n, self.field.GENERATOR, self.field)

    def run(self, a: npt.ArrayLike, b: npt.ArrayLike, c: npt.ArrayLike) -> FieldArray:
        """All four phases: the coefficients of H = (A·B − C) / Z."""
        return self.coset_intt(self.pointwise(*self.coset_ntt(*self.intt(a, b, c))))

    def _check(self, name: str, values: npt.ArrayLike) -> FieldArray:
        array, log_n = check_vector(name, values, self.field)
        if log_n != self.log_n:
            raise ValueError(f"{name} must have length n = {self.n}, got {array.size}")
        return array


def compute_h(
    a: npt.ArrayLike, b: npt.ArrayLike, c: npt.ArrayLike, *, field: PrimeField = BABYBEAR
) -> FieldArray:
    """The coefficients of H = (A·B − C) / Z, Z(x) = x^n − 1, as a Groth16 prover computes them.

    a, b, c are evaluations on <ω> of equal power-of-two length n, with A·B − C vanishing there.
    Returns n coefficients, lowest first; the last is 0. `HSteps` gives the phases one at a time.
    """
    return HSteps(check_vector("a", a, field)[1], field).run(a, b, c)


def check_vector(name: str, values: npt.ArrayLike, field: PrimeField) -> tuple[FieldArray, int]:
    """Return ``values`` as canonical elements of ``field``, and log2 of their count.

    Raises ValueError naming ``name`` unless they are 2^k elements, k up to the two-adicity.
    """
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    size = array.size
    if size == 0 or size & (size - 1):
        raise ValueError(f"{name} length must be a power of two, got {size}")
    log_n = size.bit_length() - 1
    if log_n > field.TWO_ADICITY:
        raise ValueError(
            f"{name} length must be at most 2^{field.TWO_ADICITY} ({field.name}'s two-adicity), "
            f"got 2^{log_n}"
        )
    return field.to_field(values), log_n  # values: numpy may make floats of big Python ints


def check_log_n(log_n: int, field: PrimeField, low: int) -> None:
    """Raise ValueError unless 2^log_n points fit ``field``'s largest domain and log_n ≥ ``low``."""
    if not low <= log_n <= field.TWO_ADICITY:
        raise ValueError(
            f"log_n must be between {low} and {field.TWO_ADICITY} ({field.name}'s two-adicity), "
            f"got {log_n}"
        )


def _check_shift(shift: int | None, field: PrimeField) -> int:
    if shift is None:
        return field.GENERATOR
    if not 0 < shift < field.P:
        raise ValueError(f"shift must be a nonzero field element in [1, {field.P}), got {shift}")
    return shift


def _intt(values: FieldArray, log_n: int, field: PrimeField) -> FieldArray:
    transformed = _transform(values, log_n, field, inverse=True)
    return field.mul(transformed, _plan(log_n, field).n_inverse)


def _coset_ntt(coeffs: FieldArray, log_n: int, shift: int, field: PrimeField) -> FieldArray:
    scaled = field.mul(coeffs, _coset_scales(log_n, shift, field)[0])
    return _transform(scaled, log_n, field, inverse=False)


def _coset_intt(evals: FieldArray, log_n: int, shift: int, field: PrimeField) -> FieldArray:
    transformed = _transform(evals, log_n, field, inverse=True)
    return field.mul(transformed, _coset_scales(log_n, shift, field)[1])


class _Plan:
    """Everything a transform of 2^log_n points needs but its input.

    The gather index is built on first use; the GPU port needs only the twiddles.
    """

    def __init__(self, log_n: int, field: PrimeField) -> None:
        n = 1 << log_n
        self.log_n = log_n
        self.cols = 1 << (log_n // 2)
        self.rows = n // self.cols
        self.n_inverse = np.uint64(field.inverse(n % field.P))
        root = field.root_of_unity(log_n)
        self.forward = _stage_twiddles(log_n, root, field)
        self.backward = _stage_twiddles(log_n, field.inverse(root), field)

    @functools.cached_property
    def gather(self) -> npt.NDArray[np.intp]:
        """Index reading the input in bit-reversed order into the (cols, rows) layout."""
        reversed_index = _bit_reversal(self.log_n)
        return _frozen(
            reversed_index.reshape(self.rows, self.cols).T.reshape(1 << self.log_n).astype(np.intp)
        )


@functools.lru_cache(maxsize=_CACHED_SIZES)
def _plan(log_n: int, field: PrimeField) -> _Plan:
    return _Plan(log_n, field)


@functools.lru_cache(maxsize=_CACHED_SIZES)
def _coset_scales(log_n: int, shift: int, field: PrimeField) -> tuple[FieldArray, FieldArray]:
    """shift^i, to scale coefficients before `ntt`, and n⁻¹·shift^−i, to scale after the inverse."""
    n = 1 << log_n
    up = _powers(shift, n, field)
    down = _powers(field.inverse(shift), n, field, int(_plan(log_n, field).n_inverse))
    return _frozen(up), _frozen(down)


COMPILED_POWERS_FROM = 1 << 16
"""Runs of powers at least this long are computed by `gpu.reference.cpu_backend.powers` where Numba
is
installed (the GPU's tables at 2^27: seconds instead of ~30 s of NumPy products)."""


def _powers(base: int, count: int, field: PrimeField, first: int = 1) -> FieldArray:
    """[first·base^i for i < count] mod p, compiled for long runs where Numba is there."""
    if count >= COMPILED_POWERS_FROM and cpu_backend.numba_available():
        return cpu_backend.powers(base, count, field, first)
    values = field.powers(base, count)
    return values if first == 1 else field.mul(values, np.uint64(first))


def _stage_twiddles(log_n: int, root: int, field: PrimeField) -> tuple[FieldArray, ...]:
    """Per stage s = 0 .. log_n − 1, with half-span m = 2^s: root^(j·n/2m) for j < m."""
    half = _powers(root, (1 << log_n) // 2, field)
    return tuple(_frozen(np.ascontiguousarray(half[:: half.size >> s])) for s in range(log_n))


def _bit_reversal(log_n: int) -> npt.NDArray[np.int64]:
    index = np.zeros(1, dtype=np.int64)
    for _ in range(log_n):
        index = np.concatenate([2 * index, 2 * index + 1])
    return index


def _frozen(array: _Array) -> _Array:
    """``array``, made read-only: cached tables are shared by every caller."""
    array.flags.writeable = False
    return array


def _transform(values: FieldArray, log_n: int, field: PrimeField, *, inverse: bool) -> FieldArray:
    """Iterative radix-2 decimation-in-time NTT, natural order in and out, on a copy."""
    plan = _plan(log_n, field)
    twiddles = plan.backward if inverse else plan.forward
    cols, rows = plan.cols, plan.rows
    matrix = values[plan.gather].reshape(cols, rows)
    # Reused by every stage: fresh megabyte-sized temporaries cost page faults on each use.
    product = np.empty(matrix.size // 2, dtype=np.uint64)
    scratch = np.empty_like(product)
    stage = 0
    while (m := 1 << stage) < cols:
        blocks = matrix.reshape(cols // (2 * m), 2, m, rows)
        twiddle = twiddles[stage].reshape(m, 1)
        field.butterflies(blocks[:, 0], blocks[:, 1], twiddle, product, scratch)
        stage += 1
    matrix = np.ascontiguousarray(matrix.T)
    while stage < log_n:
        k = (1 << stage) // cols
        blocks = matrix.reshape(rows // (2 * k), 2, k, cols)
        twiddle = twiddles[stage].reshape(k, cols)
        field.butterflies(blocks[:, 0], blocks[:, 1], twiddle, product, scratch)
        stage += 1
    return matrix.reshape(1 << log_n)
