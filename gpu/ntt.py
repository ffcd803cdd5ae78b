"""The number-theoretic transform over a prime field and the Groth16 prover's H computation, in
NumPy.

This is the CPU reference a GPU port must match bit for bit (compare `digest` values).

Layout of one transform of n = 2^k points: the input is gathered once into bit-reversed order,
stored as a (cols, rows) matrix, cols·rows = n, rows ≥ cols ≈ √n. Radix-2 stages whose
butterflies span fewer than ``cols`` points run on that matrix, the later stages on its
transpose, so every numpy call sweeps contiguous runs of at least √n elements rather than short
strided ones. Each stage is a handful of whole-array numpy calls; Python loops only over the
log2(n) stages. Twiddle tables are built once per size and field, and cached.

Every function takes the field as ``field`` (a `gpu.field.PrimeField`; BabyBear unless given).

>>> from gpu.goldilocks import GOLDILOCKS
>>> values = GOLDILOCKS.to_field([1, 2, 3, 4])
>>> GOLDILOCKS.to_ints(intt(ntt(values, field=GOLDILOCKS), field=GOLDILOCKS))
[1, 2, 3, 4]
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from gpu import compiled
from gpu.babybear import BABYBEAR
from gpu.field import FieldArray, PrimeField

__all__ = [
    "H_PHASES",
    "KERNELS",
    "HSteps",
    "check_kernel",
    "compute_h",
    "coset_intt",
    "coset_ntt",
    "digest",
    "digest_lanes",
    "digest_of_lanes",
    "intt",
    "ntt",
    "synthesize",
    "synthesize_into",
    "verify",
]

SYNTHESIS_CHUNK = 1 << 18
"""Elements `synthesize_into` draws and writes per step (a few MiB of cache-resident work)."""
KERNELS = ("numpy", "numba")
"""How `synthesize_into` and `verify` compute: whole-array NumPy calls, or compiled by Numba."""
H_PHASES = ("intt", "coset_ntt", "pointwise", "coset_intt")
"""The four timed phases of H, the steps of `HSteps` in their order."""
THREADED_STEP = 1 << 20
"""`synthesize_into`'s step for a synthesis on a thread that shares the GIL (bench/RESULTS.md)."""
_PRODUCT_BYTES = 1 << 20
"""Bytes of c's multiplication buffers per inner step, so they stay in a core's L2: 2^16
elements of BabyBear (two buffers), 2^14 of Goldilocks (five)."""
DIGEST_LANES = 1 << 16
"""Independent FNV-1a lanes of `digest` (fewer when n is smaller): element i feeds lane
i mod lanes, so a GPU reads the vector coalesced, one thread per lane."""
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
_CACHED_SIZES = 8
_Array = TypeVar("_Array", bound=npt.NDArray[Any])


def ntt(values: npt.ArrayLike, *, field: PrimeField = BABYBEAR) -> FieldArray:
    """Evaluations of the polynomial with coefficients ``values`` on the domain <ω>.

    Output k is Σ_j values[j]·ω^(jk), ω = ``field.root_of_unity``(log2 n); n must be a power of
    two up to 2^TWO_ADICITY and every value an element in [0, p).
    """
    array, log_n = _check_vector("values", values, field)
    return _transform(array, log_n, field, inverse=False)


def intt(values: npt.ArrayLike, *, field: PrimeField = BABYBEAR) -> FieldArray:
    """The coefficients of the polynomial whose evaluations on <ω> are ``values``; undoes `ntt`."""
    array, log_n = _check_vector("values", values, field)
    return _intt(array, log_n, field)


def coset_ntt(
    coeffs: npt.ArrayLike, shift: int | None = None, *, field: PrimeField = BABYBEAR
) -> FieldArray:
    """Evaluations of the polynomial ``coeffs`` on the coset shift·<ω>: output k at shift·ω^k.

    ``shift`` defaults to the field's generator."""
    array, log_n = _check_vector("coeffs", coeffs, field)
    shift = _check_shift(shift, field)
    return _coset_ntt(array, log_n, shift, field)


def coset_intt(
    evals: npt.ArrayLike, shift: int | None = None, *, field: PrimeField = BABYBEAR
) -> FieldArray:
    """The coefficients of the polynomial whose evaluations on shift·<ω> are ``evals``."""
    array, log_n = _check_vector("evals", evals, field)
    shift = _check_shift(shift, field)
    return _coset_intt(array, log_n, shift, field)


def synthesize(
    seed: int, index: int, log_n: int, *, field: PrimeField = BABYBEAR, kernel: str = "numpy"
) -> tuple[FieldArray, FieldArray, FieldArray]:
    """A partition's witness vectors (a, b, c = a∘b) of length 2^log_n, a function of (seed, index).

    a is drawn from the field and b is a rotated by one place; c makes A·B − C vanish on <ω>,
    as in a satisfied circuit. Equal to what `synthesize_into` writes, as uint64.

    >>> a, b, c = synthesize(seed=7, index=0, log_n=3)
    >>> bool((BABYBEAR.mul(a, b) == c).all())
    True
    """
    _check_synthesis(seed, index, log_n, field)
    a, b, c = (np.empty(1 << log_n, dtype=np.uint64) for _ in range(3))
    synthesize_into(seed, index, (a, b, c), field=field, kernel=kernel)
    return a, b, c


def synthesize_into(
    seed: int,
    index: int,
    out: Sequence[npt.NDArray[Any]],
    *,
    step: int | None = None,
    field: PrimeField = BABYBEAR,
    kernel: str = "numpy",
) -> None:
    """`synthesize` written into ``out`` (three arrays of 2^log_n elements, of the field's
    storage dtype or uint64, e.g. a pinned pool slot), so a GPU can copy them without another
    host copy.

    a is drawn from an SFC64 generator seeded by (seed, index) (``field.random_elements``).
    b is a rotated by one place, b_i = a_(i+1 mod n): half the draws, and A·B − C still
    vanishes on the domain. Each output is written once.

    ``step`` unset: steps of `SYNTHESIS_CHUNK` elements, c in `_PRODUCT_BYTES` of buffers at a
    time, all in a core's cache; fastest where synthesis has its core to itself (a worker
    process). Each NumPy call gives up the GIL, though, and on a thread beside others each
    waits to take it back: there, pass a larger power of two (`THREADED_STEP`), which makes c
    in one go per step and so far fewer calls. The same values come out either way.

    ``kernel="numba"``: the same values from one compiled pass that holds no GIL
    (`gpu.compiled`; ``step`` is then moot): for Goldilocks 2.2 to 2.8 times the rate.
    """
    size = out[0].size
    log_n = size.bit_length() - 1
    _check_synthesis(seed, index, log_n, field)
    if step is not None and (step < 2 or step & (step - 1)):
        raise ValueError(f"step must be a power of two of at least 2, got {step}")
    dtypes = {field.storage, np.dtype(np.uint64)}
    for name, target in zip("abc", out, strict=True):
        if target.shape != (1 << log_n,) or target.dtype not in dtypes:
            raise ValueError(
                f"out {name} must be a {' or '.join(sorted(map(str, dtypes)))} vector of "
                f"2^{log_n} elements, got {target.dtype} {target.shape}"
            )
    check_kernel(kernel)
    if kernel == "numba":
        compiled.synthesize_into(seed, index, out, field)
        return
    a_out, b_out, c_out = out
    bits = np.random.SFC64([seed, index])
    chunk = min(size, step or SYNTHESIS_CHUNK)
    # window[0] is the element before this step's (a_(start − 1)), window[1:] this step's.
    window = np.empty(chunk + 1, dtype=np.uint64)
    values = np.empty(chunk, dtype=field.storage)
    fitting = 1 << ((_PRODUCT_BYTES // (8 * field.CONSECUTIVE_BUFFERS)).bit_length() - 1)
    inner = min(chunk, fitting) if step is None else chunk
    buffers = tuple(np.empty(inner + 1, dtype=np.uint64) for _ in range(field.CONSECUTIVE_BUFFERS))

    def products(span: FieldArray, at: int) -> None:
        """c[at + i] = span[i]·span[i + 1] mod p, ``inner`` at a time (buffers in L2)."""
        count = span.size - 1
        for offset in range(0, count, inner):
            end = min(offset + inner, count)
            target = c_out[at + offset : at + end]
            field.consecutive_products(span[offset : end + 1], target, buffers)

    for start in range(0, size, chunk):
        field.random_elements(bits, values)
        # Each output is written once, from cache: a_i, b_(i−1) = a_i, c_(i−1) = a_(i−1)·a_i.
        a_out[start : start + chunk] = values
        window[1:] = values
        if start == 0:
            b_out[: chunk - 1] = values[1:]
            products(window[1:], 0)
        else:
            b_out[start - 1 : start + chunk - 1] = values
            products(window, start - 1)
        window[0] = window[-1]
    b_out[size - 1] = a_out[0]
    c_out[size - 1] = int(a_out[size - 1]) * int(a_out[0]) % field.P


def check_kernel(kernel: str) -> None:
    """ValueError unless ``kernel`` is one of `KERNELS`; RuntimeError for numba without Numba."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
    if kernel == "numba" and not compiled.available():
        raise RuntimeError("kernel 'numba' needs Numba: pip install 'pacer[fast]'")


def _check_synthesis(seed: int, index: int, log_n: int, field: PrimeField) -> None:
    for name, number in (("seed", seed), ("index", index)):
        if number < 0:
            raise ValueError(f"{name} must be non-negative, got {number}")
    _check_log_n(log_n, field, low=0)


def _check_log_n(log_n: int, field: PrimeField, low: int) -> None:
    if not low <= log_n <= field.TWO_ADICITY:
        raise ValueError(
            f"log_n must be between {low} and {field.TWO_ADICITY} ({field.name}'s two-adicity), "
            f"got {log_n}"
        )


class HSteps:
    """`compute_h` for one size, as its four phases, so a port can time each the same way.

    Each step takes the previous step's output; `run` chains them. Tables are built up front.
    The coset is GENERATOR·<ω>, GENERATOR the field's.

    >>> steps = HSteps(log_n=3)
    >>> a, b, c = synthesize(seed=1, index=0, log_n=3)
    >>> evals = steps.pointwise(*steps.coset_ntt(*steps.intt(a, b, c)))
    >>> bool((steps.coset_intt(evals) == compute_h(a, b, c)).all())
    True
    """

    def __init__(self, log_n: int, field: PrimeField = BABYBEAR) -> None:
        _check_log_n(log_n, field, low=0)
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
        array, log_n = _check_vector(name, values, self.field)
        if log_n != self.log_n:
            raise ValueError(f"{name} must have length n = {self.n}, got {array.size}")
        return array


def compute_h(
    a: npt.ArrayLike, b: npt.ArrayLike, c: npt.ArrayLike, *, field: PrimeField = BABYBEAR
) -> FieldArray:
    """The coefficients of H = (A·B − C) / Z, Z(x) = x^n − 1, as a Groth16 prover computes them.

    a, b, c are evaluations on <ω> of equal power-of-two length n with A·B − C vanishing there
    (as `synthesize` makes them). Returns n coefficients, lowest first; H has degree ≤ n − 2, so
    the last is 0. For the phases one at a time, use `HSteps`.
    """
    return HSteps(_check_vector("a", a, field)[1], field).run(a, b, c)


def verify(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    c: npt.ArrayLike,
    h: npt.ArrayLike,
    r: int | None = None,
    *,
    rng: np.random.Generator | None = None,
    field: PrimeField = BABYBEAR,
    kernel: str = "numpy",
) -> bool:
    """Whether H(r)·Z(r) = A(r)·B(r) − C(r) at a point r outside <ω>.

    r is drawn from ``rng`` (a fresh, unseeded generator by default) unless given. Vectors that
    do not satisfy the identity pass only if r is a root of the nonzero polynomial
    H·Z − (A·B − C), of degree < 2n: probability < 2n / p for a random r.

    No transform runs: A, B and C are evaluated at r from their values on <ω> by the
    barycentric formula V(r) = (r^n − 1)/n · Σ_i v_i·ω^i / (r − ω^i), the weights shared by
    the three and inverted in batches (`field.batch_inverse`); H(r) is a dot product with
    powers of r. Time is linear in n; beyond the inputs, memory stays a few arrays of 2^16
    elements, whatever n. ``kernel="numba"``: the same sums compiled (`gpu.compiled`), weights
    inverted in blocks and H(r) by Horner's rule.
    """
    a_, log_n = _check_vector("a", a, field)
    n = 1 << log_n
    vectors = [a_]
    for name, values in (("b", b), ("c", c), ("h", h)):
        array = _check_vector(name, values, field)[0]
        if array.size != n:
            raise ValueError(f"{name} must have the length of a ({n}), got {array.size}")
        vectors.append(array)
    if r is None:
        r = _point_off_domain(n, rng if rng is not None else np.random.default_rng(), field)
    elif not 0 <= r < field.P or field.pow(r, n) == 1:
        raise ValueError(f"r must be a field element outside the domain (r^n ≠ 1), got {r}")
    check_kernel(kernel)
    z_r = (field.pow(r, n) - 1) % field.P
    scale = z_r * field.inverse(n % field.P) % field.P
    if kernel == "numba":
        sums = compiled.barycentric_sums(r, log_n, field, *vectors[:3])
        h_r = compiled.evaluate(vectors[3], r, field)
    else:
        sums = _barycentric_sums(r, log_n, field, *vectors[:3])
        h_r = _evaluate(vectors[3], r, field)
    a_r, b_r, c_r = (scale * s % field.P for s in sums)
    return (h_r * z_r - (a_r * b_r - c_r)) % field.P == 0


_VERIFY_CHUNK = 1 << 16
"""Elements per step of `verify`'s sums: its temporaries stay a few such arrays, in cache."""


def _barycentric_sums(r: int, log_n: int, field: PrimeField, *evals: FieldArray) -> list[int]:
    """Σ_i v_i·ω^i / (r − ω^i) mod p for each v in ``evals`` (values on <ω>, |<ω>| = 2^log_n).

    r must lie outside <ω>. The weight ω^i / (r − ω^i) is 1 / (r·ω^−i − 1): per chunk, one
    table of ω^−i scaled by r·ω^−start, and one batch inversion shared by every vector.
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


def _evaluate(coeffs: FieldArray, x: int, field: PrimeField) -> int:
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


def digest(h: npt.ArrayLike, *, field: PrimeField = BABYBEAR) -> str:
    """Hex fingerprint of a vector of field elements: compare CPU and GPU results.

    Element i (its canonical value as a uint64) is folded by FNV-1a/64 into lane i mod L,
    L = min(n, `DIGEST_LANES`); the digest is SHA-256 of n and the lanes' final states. A GPU
    computes the lanes in one coalesced pass (``gpu.ntt_cuda``) and copies back 8·L bytes
    instead of the vector. It tells results apart; it is not collision-resistant against
    someone choosing vectors (FNV is not).
    """
    values = field.to_field(h)
    return digest_of_lanes(values.size, digest_lanes(values))


def digest_lanes(values: FieldArray) -> npt.NDArray[np.uint64]:
    """The FNV-1a/64 lane states of `digest` for a vector of canonical elements."""
    size = values.size
    if size == 0 or size & (size - 1):
        raise ValueError(f"values length must be a power of two, got {size}")
    lanes = min(size, DIGEST_LANES)
    state = np.full(lanes, FNV_OFFSET, dtype=np.uint64)
    prime = np.uint64(FNV_PRIME)
    for row in np.asarray(values).reshape(size // lanes, lanes):
        np.bitwise_xor(state, row.astype(np.uint64), out=state)
        np.multiply(state, prime, out=state)  # mod 2^64, as on the GPU
    return state


def digest_of_lanes(size: int, lanes: npt.NDArray[np.uint64]) -> str:
    """`digest` from the element count and the lane states (as a GPU returns them)."""
    return hashlib.sha256(size.to_bytes(8, "little") + lanes.astype("<u8").tobytes()).hexdigest()


def _check_vector(name: str, values: npt.ArrayLike, field: PrimeField) -> tuple[FieldArray, int]:
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


def _check_shift(shift: int | None, field: PrimeField) -> int:
    if shift is None:
        return field.GENERATOR
    if not 0 < shift < field.P:
        raise ValueError(f"shift must be a nonzero field element in [1, {field.P}), got {shift}")
    return shift


def _point_off_domain(n: int, rng: np.random.Generator, field: PrimeField) -> int:
    while True:
        r = int(rng.integers(0, field.P, dtype=np.uint64))
        if field.pow(r, n) != 1:
            return r


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

    The gather index is built on first use: the GPU port reads only the twiddles, and at 2^27
    the index is 1 GiB and seconds of work.
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
        """Gathering through this reads the input in bit-reversed order straight into the
        transposed (cols, rows) layout the early stages run on."""
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
    up = field.powers(shift, n)
    down = field.mul(field.powers(field.inverse(shift), n), _plan(log_n, field).n_inverse)
    return _frozen(up), _frozen(down)


def _stage_twiddles(log_n: int, root: int, field: PrimeField) -> tuple[FieldArray, ...]:
    """Per stage s = 0 .. log_n − 1, with half-span m = 2^s: root^(j·n/2m) for j < m."""
    half = field.powers(root, (1 << log_n) // 2)
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
