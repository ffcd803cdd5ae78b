"""Checking a proved partition: H(r)·Z(r) = A(r)·B(r) − C(r) at a random point r, no transform.

A, B and C are evaluated at r by the barycentric formula, and H by a dot product with powers of
r. Time is linear in n; memory beyond the inputs stays small (docs/decisions/gpu.md, D98).

>>> from gpu.reference.ntt import compute_h
>>> from gpu.reference.synthesis import synthesize
>>> a, b, c = synthesize(seed=1, index=0, log_n=4)
>>> verify(a, b, c, compute_h(a, b, c)), verify(a, b, a, compute_h(a, b, c))
(True, False)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpu.field.babybear import BABYBEAR
from gpu.field.prime import FieldArray, PrimeField
from gpu.reference import cpu_backend
from gpu.reference.ntt import check_vector

__all__ = ["verify"]

_VERIFY_CHUNK = 1 << 16
"""Elements per step of `verify`'s sums: its temporaries stay a few such arrays, in cache."""


def verify(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    c: npt.ArrayLike,
    h: npt.ArrayLike,
    r: int | None = None,
    *,
    rng: np.random.Generator | None = None,
    field: PrimeField = BABYBEAR,
    backend: str = "numpy",
) -> bool:
    """Whether H(r)·Z(r) = A(r)·B(r) − C(r) at a point r outside <ω>.

    r is drawn from ``rng`` (a fresh generator by default) unless given. Wrong vectors pass with
    probability < 2n / p. A, B and C use the barycentric formula
    V(r) = (r^n − 1)/n · Σ_i v_i·ω^i / (r − ω^i), weights shared and inverted in batches.
    ``backend="numba"`` runs the same sums compiled (`gpu.reference.cpu_backend`).
    """
    a_, log_n = check_vector("a", a, field)
    n = 1 << log_n
    vectors = [a_]
    for name, values in (("b", b), ("c", c), ("h", h)):
        array = check_vector(name, values, field)[0]
        if array.size != n:
            raise ValueError(f"{name} must have the length of a ({n}), got {array.size}")
        vectors.append(array)
    if r is None:
        r = _point_off_domain(n, rng if rng is not None else np.random.default_rng(), field)
    elif not 0 <= r < field.P or field.pow(r, n) == 1:
        raise ValueError(f"r must be a field element outside the domain (r^n ≠ 1), got {r}")
    cpu_backend.check(backend)
    z_r = (field.pow(r, n) - 1) % field.P
    scale = z_r * field.inverse(n % field.P) % field.P
    if backend == "numba":
        sums = cpu_backend.barycentric_sums(r, log_n, field, *vectors[:3])
        h_r = cpu_backend.evaluate(vectors[3], r, field)
    else:
        sums = barycentric_sums(r, log_n, field, *vectors[:3])
        h_r = evaluate(vectors[3], r, field)
    a_r, b_r, c_r = (scale * s % field.P for s in sums)
    return (h_r * z_r - (a_r * b_r - c_r)) % field.P == 0


def barycentric_sums(r: int, log_n: int, field: PrimeField, *evals: FieldArray) -> list[int]:
    """Σ_i v_i·ω^i / (r − ω^i) mod p for each v in ``evals`` (values on <ω>, |<ω>| = 2^log_n).

    r must lie outside <ω>. Each chunk inverts its weights 1 / (r·ω^−i − 1) in one shared batch.
    """
    n = 1 << log_n
    chunk = min(n, _VERIFY_CHUNK)
    omega_inverse = field.inverse(field.root_of_unity(log_n))
    omega_inverse_powers = field.powers(omega_inverse, chunk)
    omega_inverse_chunk = field.pow(omega_inverse, chunk)
    one = np.uint64(1)
    sums = [0] * len(evals)
    r_shifted = r  # r·ω^−start
    for start in range(0, n, chunk):
        scaled = field.mul(omega_inverse_powers, np.uint64(r_shifted))
        weights = field.batch_inverse(field.sub(scaled, one))
        for k, values in enumerate(evals):
            sums[k] += field.sum(field.mul(values[start : start + chunk], weights))
        r_shifted = r_shifted * omega_inverse_chunk % field.P
    return [s % field.P for s in sums]


def evaluate(coeffs: FieldArray, x: int, field: PrimeField) -> int:
    """Σ_i coeffs_i·x^i mod p, a chunk at a time against one table of powers of x."""
    chunk = min(coeffs.size, _VERIFY_CHUNK)
    x_powers = field.powers(x, chunk)
    x_chunk = field.pow(x, chunk)
    total = 0
    x_start = 1  # x^start
    for start in range(0, coeffs.size, chunk):
        dot = field.sum(field.mul(coeffs[start : start + chunk], x_powers))
        total = (total + x_start * dot) % field.P
        x_start = x_start * x_chunk % field.P
    return total


def _point_off_domain(n: int, rng: np.random.Generator, field: PrimeField) -> int:
    while True:
        r = int(rng.integers(0, field.P, dtype=np.uint64))
        if field.pow(r, n) != 1:
            return r
