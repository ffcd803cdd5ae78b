"""A partition's witness vectors a, b and c = a∘b, drawn from (seed, index), on the CPU.

`synthesize` returns new vectors. `synthesize_into` writes given buffers, such as a pinned slot,
each once. Both run on a CPU backend (`gpu.reference.cpu_backend.CPU_BACKENDS`) with the same
values bit for bit.

>>> a, b, c = synthesize(seed=7, index=0, log_n=3)
>>> bool((BABYBEAR.mul(a, b) == c).all())
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu.field.babybear import BABYBEAR
from gpu.field.prime import FieldArray, PrimeField
from gpu.reference import cpu_backend
from gpu.reference.ntt import check_log_n

__all__ = ["SYNTHESIS_CHUNK", "THREADED_STEP", "synthesize", "synthesize_into"]

SYNTHESIS_CHUNK = 1 << 18
"""Elements `synthesize_into` draws and writes per step (a few MiB of cache-resident work)."""
THREADED_STEP = 1 << 20
"""`synthesize_into`'s step for a synthesis on a thread that shares the GIL (bench/RESULTS.md)."""
_PRODUCT_BYTES = 1 << 20
"""Bytes of c's multiplication buffers per inner step, so they stay in a core's L2: 2^16
elements of BabyBear (two buffers), 2^14 of Goldilocks (five)."""


def synthesize(
    seed: int, index: int, log_n: int, *, field: PrimeField = BABYBEAR, backend: str = "numpy"
) -> tuple[FieldArray, FieldArray, FieldArray]:
    """A partition's witness vectors (a, b, c = a∘b) of length 2^log_n, from (seed, index).

    a is drawn from the field, b is a rotated by one place, and A·B − C vanishes on <ω>. Equal to
    what `synthesize_into` writes, as uint64.
    """
    _check_partition(seed, index, log_n, field)
    a, b, c = (np.empty(1 << log_n, dtype=np.uint64) for _ in range(3))
    synthesize_into(seed, index, (a, b, c), field=field, backend=backend)
    return a, b, c


def synthesize_into(
    seed: int,
    index: int,
    out: Sequence[npt.NDArray[Any]],
    *,
    step: int | None = None,
    field: PrimeField = BABYBEAR,
    backend: str = "numpy",
) -> None:
    """Write `synthesize`'s vectors into ``out``: three arrays of 2^log_n elements.

    ``out`` is of the storage dtype or uint64, such as a pinned slot. a is drawn from SFC64 seeded
    by (seed, index); b_i = a_(i+1 mod n). Each output is written once.

    ``step`` unset works in cache-sized steps, fastest in a worker process. On a thread beside
    others, pass `THREADED_STEP` to make far fewer GIL-releasing calls. ``backend="numba"`` runs one
    compiled pass without the GIL. The values are the same every way.
    """
    size = out[0].size
    log_n = size.bit_length() - 1
    _check_partition(seed, index, log_n, field)
    if step is not None and (step < 2 or step & (step - 1)):
        raise ValueError(f"step must be a power of two of at least 2, got {step}")
    dtypes = {field.storage, np.dtype(np.uint64)}
    for name, target in zip("abc", out, strict=True):
        if target.shape != (1 << log_n,) or target.dtype not in dtypes:
            raise ValueError(
                f"out {name} must be a {' or '.join(sorted(map(str, dtypes)))} vector of "
                f"2^{log_n} elements, got {target.dtype} {target.shape}"
            )
    cpu_backend.check(backend)
    if backend == "numba":
        cpu_backend.synthesize_into(seed, index, out, field)
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


def _check_partition(seed: int, index: int, log_n: int, field: PrimeField) -> None:
    for name, number in (("seed", seed), ("index", index)):
        if number < 0:
            raise ValueError(f"{name} must be non-negative, got {number}")
    check_log_n(log_n, field, low=0)
