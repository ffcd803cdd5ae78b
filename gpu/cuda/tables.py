"""The tables the H computation's transforms read, for 2^log_n points of a field.

`device_tables` computes them on the device from `table_recipes`. `host_tables` builds them on
the host, as the reference the device's are tested against. `compiled_kernels` compiles a
device's kernels. This module imports without CuPy.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu.cuda.kernels import BLOCK, KERNEL_NAMES, check_log_n, cuda_source
from gpu.field.babybear import BABYBEAR
from gpu.field.prime import FieldArray, PrimeField

# The host tables are gpu.reference.ntt's own (same code path, hence the same values); they are
# private
# there because they are cached and read-only, which is exactly how they are used here.
from gpu.reference.ntt import HSteps, _coset_scales, _plan

__all__ = [
    "DeviceTables",
    "HostTables",
    "TableRecipe",
    "compiled_kernels",
    "device_tables",
    "h_scalars",
    "host_tables",
    "table_recipes",
    "table_squares",
]

_CACHED_SIZES = 8

DeviceArray = Any
"""A ``cupy.ndarray`` (typed Any: CuPy ships no stubs)."""


@dataclass(frozen=True)
class HostTables:
    """`gpu.reference.ntt`'s tables for one size and field, laid out for the kernels."""

    forward: npt.NDArray[Any]
    """Every stage's twiddles back to back: stage s (half-span m = 2^s) at [m − 1, 2m − 1)."""
    backward: npt.NDArray[Any]
    coset_up: npt.NDArray[Any]
    """GENERATOR^i, applied to coefficients before the forward transform."""
    coset_down: npt.NDArray[Any]
    """n⁻¹·GENERATOR^−i, applied after the inverse transform."""
    n_inverse: int
    z_inverse: int
    """1 / (GENERATOR^n − 1): Z's value on the whole coset, inverted."""


@functools.lru_cache(maxsize=_CACHED_SIZES)
def host_tables(log_n: int, field: PrimeField = BABYBEAR) -> HostTables:
    """The tables for 2^log_n points on the host, from `gpu.reference.ntt`'s cached tables.

    Tests check the device's tables against these, and feed them to the kernels' simulation.
    """
    check_log_n(log_n, field)
    plan = _plan(log_n, field)
    up, down = _coset_scales(log_n, field.GENERATOR, field)

    def narrow(array: FieldArray) -> npt.NDArray[Any]:
        # Goldilocks tables are uint64 already: the cached arrays themselves (read-only), not
        # copies of their GiB.
        return array.astype(field.storage, copy=False)

    return HostTables(
        forward=narrow(np.concatenate(plan.forward)),
        backward=narrow(np.concatenate(plan.backward)),
        coset_up=narrow(up),
        coset_down=narrow(down),
        n_inverse=int(plan.n_inverse),
        z_inverse=field.inverse(HSteps(log_n, field).z_on_coset),
    )


@dataclass(frozen=True)
class DeviceTables:
    forward: DeviceArray
    backward: DeviceArray
    coset_up: DeviceArray
    coset_down: DeviceArray


@dataclass(frozen=True)
class TableRecipe:
    """How `power_table` fills one table: ``count`` elements first·base^e(i).

    e(i) = i, or with ``staged`` the twiddle exponent of the stage-by-stage layout.
    """

    base: int
    first: int
    count: int
    staged: bool


def table_recipes(log_n: int, field: PrimeField) -> tuple[TableRecipe, ...]:
    """The recipes of forward, backward, coset_up and coset_down, in that order.

    They use the same roots and shifts as `host_tables`, so they give the same elements.
    """
    n = 1 << log_n
    root = field.root_of_unity(log_n)
    shift = field.GENERATOR
    n_inverse, _ = h_scalars(log_n, field)
    return (
        TableRecipe(root, 1, n - 1, staged=True),
        TableRecipe(field.inverse(root), 1, n - 1, staged=True),
        TableRecipe(shift, 1, n, staged=False),
        TableRecipe(field.inverse(shift), n_inverse, n, staged=False),
    )


def table_squares(base: int, field: PrimeField) -> npt.NDArray[Any]:
    """base^(2^k) mod p for k < 32, in the storage dtype: the factors `power_table` multiplies."""
    squares, value = [], base % field.P
    for _ in range(32):
        squares.append(value)
        value = value * value % field.P
    return np.array(squares, dtype=field.storage)


def h_scalars(log_n: int, field: PrimeField) -> tuple[int, int]:
    """n⁻¹ and 1 / (GENERATOR^n − 1), Z's inverse on the coset, for 2^log_n points."""
    n = 1 << log_n
    return field.inverse(n % field.P), field.inverse((field.pow(field.GENERATOR, n) - 1) % field.P)


@functools.lru_cache(maxsize=_CACHED_SIZES)
def device_tables(log_n: int, field: PrimeField, device_id: int) -> DeviceTables:
    """The four tables, computed on device ``device_id`` in milliseconds.

    They equal `host_tables` element for element (tests/gpu/test_ntt_cuda.py).
    """
    import cupy

    kernel = compiled_kernels(device_id, field)["power_table"]
    element = field.storage.type
    tables = []
    with cupy.cuda.Device(device_id):
        for recipe in table_recipes(log_n, field):
            out = cupy.empty(recipe.count, dtype=field.storage)
            squares = cupy.asarray(table_squares(recipe.base, field))
            args = (out, squares, element(recipe.first), np.uint32(recipe.count),
                    np.int32(log_n), np.int32(recipe.staged))  # fmt: skip
            kernel((-(-recipe.count // BLOCK),), (BLOCK,), args)
            tables.append(out)
        # Filled on the current stream; callers launch on their own (maybe non-blocking)
        # streams, which do not wait for it.
        cupy.cuda.get_current_stream().synchronize()
    return DeviceTables(*tables)


@functools.cache
def compiled_kernels(device_id: int, field: PrimeField) -> dict[str, Any]:
    """Every kernel of `gpu.cuda.kernels` for ``field``, compiled once for ``device_id``."""
    import cupy

    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(code=cuda_source(field), options=("--std=c++17",))
        return {name: module.get_function(name) for name in KERNEL_NAMES}
