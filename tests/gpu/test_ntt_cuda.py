"""The CUDA port of the H computation against the NumPy reference, bit for bit.

The tests marked ``gpu`` need CuPy and a device. The rest run anywhere: the kernels' source
and launch plan (`gpu.cuda.kernels`) need no CuPy, and a NumPy simulation of each kernel's
per-thread index arithmetic, driven by the same launch plan and tables as the device code,
reproduces `gpu.reference.ntt` exactly.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from gpu.cuda import ntt as ntt_cuda
from gpu.cuda import tables as transform_tables
from gpu.cuda.kernels import HEAD_LOG_TILE, KERNEL_NAMES, cuda_source, launch_plan
from gpu.cuda.tables import HostTables, host_tables
from gpu.field.babybear import BABYBEAR
from gpu.field.goldilocks import GOLDILOCKS
from gpu.field.prime import FieldArray, PrimeField
from gpu.reference.digest import digest
from gpu.reference.ntt import HSteps, compute_h, coset_intt, coset_ntt, intt, ntt
from gpu.reference.synthesis import synthesize
from gpu.reference.verification import verify

U32 = npt.NDArray[np.uint32]
Stored = npt.NDArray[Any]
"""A vector in a field's storage dtype, as the kernels hold it."""
FIELDS = [BABYBEAR, GOLDILOCKS]
each_field = pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)


# --- CPU: the module and its CUDA source ------------------------------------------------------


@each_field
def test_every_kernel_is_defined_once_in_the_source(field: PrimeField) -> None:
    defined = re.findall(r'extern "C" __global__ void (\w+)\(', cuda_source(field))
    assert sorted(defined) == sorted(KERNEL_NAMES)
    assert {launch.kernel for n in range(1, 25) for launch in launch_plan(n)} <= set(defined)


@each_field
def test_source_brackets_balance(field: PrimeField) -> None:
    for opening, closing in ("{}", "()", "[]"):
        depth = 0
        for char in cuda_source(field):
            depth += (char == opening) - (char == closing)
            assert depth >= 0, f"unbalanced {closing}"
        assert depth == 0, f"unbalanced {opening}"


@each_field
def test_source_defines_the_fields_element_type_and_prime_once(field: PrimeField) -> None:
    source = cuda_source(field)
    assert re.findall(r"typedef (\w+) elem;", source) == [f"u{8 * field.storage.itemsize}"]
    (prime,) = re.findall(r"#define FIELD_P (0x[0-9a-f]+)u", source)
    assert int(prime, 16) == field.P


def test_head_tile_fits_the_shared_array() -> None:
    assert f"tile[1 << {HEAD_LOG_TILE}]" in cuda_source(GOLDILOCKS)
    assert all(launch.block <= 1024 for n in range(1, 28) for launch in launch_plan(n))


@pytest.mark.parametrize("log_n", [1, 2, 10, 11, 12, 13, 20, 24, 27], ids=lambda n: f"2^{n}")
def test_launch_plan_covers_every_stage_once(log_n: int) -> None:
    stages: list[int] = []
    plan = launch_plan(log_n)
    for launch in plan:
        width = {"ntt_head": launch.log_tile, "ntt_stage2": 2, "ntt_stage": 1}[launch.kernel]
        stages.extend(range(launch.stage, launch.stage + width))
        threads = launch.grid * launch.block
        per_thread = {"ntt_head": 2, "ntt_stage2": 4, "ntt_stage": 2}[launch.kernel]
        assert threads * per_thread >= 1 << log_n
    assert stages == list(range(log_n))
    assert [launch.last for launch in plan] == [False] * (len(plan) - 1) + [True]


@each_field
def test_host_tables_are_the_reference_tables(field: PrimeField) -> None:
    log_n = 6
    tables = host_tables(log_n, field)
    root = field.root_of_unity(log_n)
    assert tables.forward.dtype == tables.coset_down.dtype == field.storage
    for s in range(log_n):
        m = 1 << s
        expected = [pow(root, j << (log_n - 1 - s), field.P) for j in range(m)]
        assert tables.forward[m - 1 : 2 * m - 1].tolist() == expected
    assert tables.n_inverse * (1 << log_n) % field.P == 1


# --- CPU: a NumPy simulation of the kernels ----------------------------------------------------


def brev_shift(x: U32, log_n: int) -> U32:
    """``__brev(x) >> (32 - log_n)``."""
    reversed_ = np.zeros_like(x)
    for bit in range(32):
        reversed_ |= ((x >> np.uint32(bit)) & np.uint32(1)) << np.uint32(31 - bit)
    return reversed_ >> np.uint32(32 - log_n)


def scale_out(
    field: PrimeField, v: FieldArray, i: U32, mode: int, scalar: int, vec: Stored
) -> FieldArray:
    if mode == 1:
        return field.mul(v, np.uint64(scalar))
    if mode == 2:
        return field.mul(v, vec[i].astype(np.uint64))
    return v


def sim_head(
    field: PrimeField,
    src: Stored,
    dst: Stored,
    twiddles: Stored,
    in_scale: Stored | None,
    out: tuple[int, int, Stored],
    log_n: int,
    log_tile: int,
    grid: int,
    block: int,
) -> None:
    """``ntt_head``, every (blockIdx.x, threadIdx.x) at once; a stage's threads are disjoint."""
    out_mode, out_scalar, out_vec = out
    t = np.arange(block, dtype=np.uint32)[None, :]
    base = (np.arange(grid, dtype=np.uint32) << np.uint32(log_tile))[:, None]
    half = np.uint32(1 << (log_tile - 1))
    tile = np.zeros((grid, 2 * block), dtype=np.uint64)
    rows = np.arange(grid)[:, None]
    for r in range(2):
        pos = t + np.uint32(r) * half
        source = brev_shift(base + pos, log_n)
        v = src[source].astype(np.uint64)
        if in_scale is not None:
            v = field.mul(v, in_scale[source].astype(np.uint64))
        tile[rows, np.broadcast_to(pos, v.shape)] = v
    for s in range(log_tile):
        m = np.uint32(1 << s)
        j = t & (m - np.uint32(1))
        i0 = ((t >> np.uint32(s)) << np.uint32(s + 1)) + j
        w = twiddles[m - np.uint32(1) + j].astype(np.uint64)
        lo = tile[rows, np.broadcast_to(i0, (grid, block))]
        hi = field.mul(tile[rows, np.broadcast_to(i0 + m, (grid, block))], w)
        tile[rows, np.broadcast_to(i0, (grid, block))] = field.add(lo, hi)
        tile[rows, np.broadcast_to(i0 + m, (grid, block))] = field.sub(lo, hi)
    for r in range(2):
        pos = np.broadcast_to(t + np.uint32(r) * half, (grid, block))
        g = base + pos
        dst[g] = scale_out(field, tile[rows, pos], g, out_mode, out_scalar, out_vec)


def sim_stage(
    field: PrimeField,
    data: Stored,
    twiddles: Stored,
    out: tuple[int, int, Stored],
    span: int,
    stage: int,
    threads: int,
) -> None:
    out_mode, out_scalar, out_vec = out
    t = np.arange(threads, dtype=np.uint32)
    t = t[t < span]
    m = np.uint32(1 << stage)
    j = t & (m - np.uint32(1))
    i0 = ((t >> np.uint32(stage)) << np.uint32(stage + 1)) + j
    i1 = i0 + m
    lo = data[i0].astype(np.uint64)
    hi = field.mul(data[i1].astype(np.uint64), twiddles[m - np.uint32(1) + j].astype(np.uint64))
    data[i0] = scale_out(field, field.add(lo, hi), i0, out_mode, out_scalar, out_vec)
    data[i1] = scale_out(field, field.sub(lo, hi), i1, out_mode, out_scalar, out_vec)


def sim_stage2(
    field: PrimeField,
    data: Stored,
    twiddles: Stored,
    out: tuple[int, int, Stored],
    span: int,
    stage: int,
    threads: int,
) -> None:
    out_mode, out_scalar, out_vec = out
    t = np.arange(threads, dtype=np.uint32)
    t = t[t < span]
    m = np.uint32(1 << stage)
    one = np.uint32(1)
    j = t & (m - one)
    i0 = ((t >> np.uint32(stage)) << np.uint32(stage + 2)) + j
    i1, i2, i3 = i0 + m, i0 + np.uint32(2) * m, i0 + np.uint32(3) * m
    w = twiddles[m - one + j].astype(np.uint64)
    x0, x1 = data[i0].astype(np.uint64), field.mul(data[i1].astype(np.uint64), w)
    x2, x3 = data[i2].astype(np.uint64), field.mul(data[i3].astype(np.uint64), w)
    y0, y1 = field.add(x0, x1), field.sub(x0, x1)
    y2, y3 = field.add(x2, x3), field.sub(x2, x3)
    v2 = field.mul(y2, twiddles[np.uint32(2) * m - one + j].astype(np.uint64))
    v3 = field.mul(y3, twiddles[np.uint32(2) * m - one + j + m].astype(np.uint64))
    data[i0] = scale_out(field, field.add(y0, v2), i0, out_mode, out_scalar, out_vec)
    data[i2] = scale_out(field, field.sub(y0, v2), i2, out_mode, out_scalar, out_vec)
    data[i1] = scale_out(field, field.add(y1, v3), i1, out_mode, out_scalar, out_vec)
    data[i3] = scale_out(field, field.sub(y1, v3), i3, out_mode, out_scalar, out_vec)


def sim_transform(
    field: PrimeField,
    values: FieldArray,
    tables: HostTables,
    log_tile: int,
    *,
    inverse: bool,
    in_scale: Stored | None = None,
    out_scalar: int | None = None,
    out_vector: Stored | None = None,
) -> FieldArray:
    """`CudaHSteps._transform`'s launches, simulated; returns the destination buffer."""
    log_n = values.size.bit_length() - 1
    src = values.astype(field.storage)
    dst = np.full_like(src, np.iinfo(field.storage).max)  # like cupy.empty: garbage until written
    twiddles = tables.backward if inverse else tables.forward
    placeholder = tables.coset_up
    if out_vector is not None:
        out = (2, 0, out_vector)
    elif out_scalar is not None:
        out = (1, out_scalar, placeholder)
    else:
        out = (0, 0, placeholder)
    for launch in launch_plan(log_n, log_tile):
        mode = out if launch.last else (0, 0, placeholder)
        threads = launch.grid * launch.block
        if launch.kernel == "ntt_head":
            args = (launch.log_tile, launch.grid, launch.block)
            sim_head(field, src, dst, twiddles, in_scale, mode, log_n, *args)
        elif launch.kernel == "ntt_stage2":
            sim_stage2(field, dst, twiddles, mode, values.size >> 2, launch.stage, threads)
        else:
            sim_stage(field, dst, twiddles, mode, values.size >> 1, launch.stage, threads)
    return dst.astype(np.uint64)


SIM_CASES = [(n, t) for n in range(1, 13) for t in sorted({1, 2, 3, min(n, 11)}) if t <= n]


@each_field
@pytest.mark.parametrize(
    ("log_n", "log_tile"), SIM_CASES, ids=[f"2^{n}-tile{t}" for n, t in SIM_CASES]
)
def test_simulated_kernels_match_the_reference_transforms(
    field: PrimeField, log_n: int, log_tile: int
) -> None:
    tables = host_tables(log_n, field)
    values = np.random.default_rng([log_n, log_tile]).integers(0, field.P, 1 << log_n, np.uint64)
    forward = sim_transform(field, values, tables, log_tile, inverse=False)
    assert (forward == ntt(values, field=field)).all()
    inverse = sim_transform(
        field, values, tables, log_tile, inverse=True, out_scalar=tables.n_inverse
    )
    assert (inverse == intt(values, field=field)).all()
    up = sim_transform(field, values, tables, log_tile, inverse=False, in_scale=tables.coset_up)
    assert (up == coset_ntt(values, field=field)).all()
    down = sim_transform(
        field, values, tables, log_tile, inverse=True, out_vector=tables.coset_down
    )
    assert (down == coset_intt(values, field=field)).all()


@each_field
@pytest.mark.parametrize("log_n", [3, 12, 14], ids=lambda n: f"2^{n}")
def test_simulated_h_matches_compute_h(field: PrimeField, log_n: int) -> None:
    tables = host_tables(log_n, field)
    a, b, c = synthesize(seed=11, index=log_n, log_n=log_n, field=field)
    log_tile = HEAD_LOG_TILE

    def transform(values: FieldArray, **kwargs: Any) -> FieldArray:
        return sim_transform(field, values, tables, log_tile, **kwargs)

    coeffs = [transform(v, inverse=True, out_scalar=tables.n_inverse) for v in (a, b, c)]
    evals = [transform(v, inverse=False, in_scale=tables.coset_up) for v in coeffs]
    z_inverse = np.uint64(tables.z_inverse)
    h_evals = field.mul(field.sub(field.mul(evals[0], evals[1]), evals[2]), z_inverse)
    h = transform(h_evals, inverse=True, out_vector=tables.coset_down)
    assert digest(h, field=field) == digest(HSteps(log_n, field).run(a, b, c), field=field)


def sim_power_table(
    field: PrimeField, recipe: transform_tables.TableRecipe, log_n: int
) -> FieldArray:
    """``power_table``, every thread at once: first times the squares of each set bit."""
    i = np.arange(recipe.count, dtype=np.uint64)
    exponent = i
    if recipe.staged:
        t = i + np.uint64(1)
        stage = np.floor(np.log2(t.astype(np.float64))).astype(np.uint64)  # 31 − __clz(t)
        exponent = (t - (np.uint64(1) << stage)) << (np.uint64(log_n - 1) - stage)
    squares = transform_tables.table_squares(recipe.base, field).astype(np.uint64)
    values = np.full(recipe.count, recipe.first, dtype=np.uint64)
    for k in range(32):
        bit = ((exponent >> np.uint64(k)) & np.uint64(1)).astype(bool)
        values[bit] = field.mul(values[bit], squares[k])
    return values


@each_field
@pytest.mark.parametrize("log_n", range(1, 13), ids=lambda n: f"2^{n}")
def test_simulated_power_tables_are_the_host_tables(field: PrimeField, log_n: int) -> None:
    tables = host_tables(log_n, field)
    expected = (tables.forward, tables.backward, tables.coset_up, tables.coset_down)
    recipes = transform_tables.table_recipes(log_n, field)
    assert len(recipes) == len(expected)
    for recipe, table in zip(recipes, expected, strict=True):
        assert (sim_power_table(field, recipe, log_n) == table.astype(np.uint64)).all()
    assert transform_tables.h_scalars(log_n, field) == (tables.n_inverse, tables.z_inverse)


def test_table_squares_are_repeated_squares_in_storage_dtype() -> None:
    squares = transform_tables.table_squares(7, BABYBEAR)
    assert squares.dtype == BABYBEAR.storage
    assert squares.tolist() == [pow(7, 1 << k, BABYBEAR.P) for k in range(32)]


# --- GPU: the real kernels ---------------------------------------------------------------------

GPU_SIZES = list(range(10, 21))


def fresh_seed() -> int:
    return int(np.random.default_rng().integers(2**32))


def host(values: Any) -> FieldArray:
    return np.asarray(values.get()).astype(np.uint64)


@pytest.mark.gpu
@each_field
@pytest.mark.parametrize("log_n", GPU_SIZES, ids=lambda n: f"2^{n}")
def test_each_phase_is_bit_identical(cupy_module: Any, field: PrimeField, log_n: int) -> None:
    cupy = cupy_module
    stream = cupy.cuda.Stream(non_blocking=True)
    steps = ntt_cuda.CudaHSteps(log_n, stream=stream, field=field)
    reference = HSteps(log_n, field)
    a, b, c = synthesize(seed=fresh_seed(), index=0, log_n=log_n, field=field)
    inputs = steps.h2d(a, b, c)
    stream.synchronize()
    assert all((host(d) == v).all() for d, v in zip(inputs, (a, b, c), strict=True))

    expected = reference.intt(a, b, c)
    got = steps.intt(*ntt_cuda.to_device((a, b, c), field))
    stream.synchronize()
    assert all((host(g) == e).all() for g, e in zip(got, expected, strict=True))

    coeffs = expected
    expected = reference.coset_ntt(*coeffs)
    got = steps.coset_ntt(*ntt_cuda.to_device(coeffs, field))
    stream.synchronize()
    assert all((host(g) == e).all() for g, e in zip(got, expected, strict=True))

    h_evals = reference.pointwise(*expected)
    got_h_evals = steps.pointwise(*ntt_cuda.to_device(expected, field))
    stream.synchronize()
    assert (host(got_h_evals) == h_evals).all()

    h = reference.coset_intt(h_evals)
    got_h = steps.coset_intt(ntt_cuda.to_device(h_evals, field))
    assert (steps.d2h(got_h) == h).all()


@pytest.mark.gpu
@each_field
@pytest.mark.parametrize("log_n", GPU_SIZES, ids=lambda n: f"2^{n}")
def test_run_is_bit_identical_and_verifies(cupy_module: Any, field: PrimeField, log_n: int) -> None:
    cupy = cupy_module
    steps = ntt_cuda.CudaHSteps(log_n, stream=cupy.cuda.Stream(non_blocking=True), field=field)
    seed = fresh_seed()
    a, b, c = synthesize(seed=seed, index=1, log_n=log_n, field=field)
    h = steps.run(a, b, c)
    assert h.dtype == np.uint64
    expected = HSteps(log_n, field).run(a, b, c)
    assert digest(h, field=field) == digest(expected, field=field), f"seed {seed}"
    assert verify(a, b, c, h, field=field)


@pytest.mark.gpu
@each_field
@pytest.mark.parametrize("log_n", [1, 10, 16, 17, 21], ids=lambda n: f"2^{n}")
def test_device_digest_equals_the_host_digest(
    cupy_module: Any, field: PrimeField, log_n: int
) -> None:
    stream = cupy_module.cuda.Stream(non_blocking=True)
    steps = ntt_cuda.CudaHSteps(log_n, stream=stream, field=field)
    h = compute_h(*synthesize(seed=fresh_seed(), index=3, log_n=log_n, field=field), field=field)
    on_device = ntt_cuda.to_device(h, field)
    cupy_module.cuda.Device().synchronize()  # uploaded on the default stream, not on steps'
    assert steps.digest(on_device) == digest(h, field=field)


@pytest.mark.gpu
@each_field
@pytest.mark.parametrize("log_n", [10, 15, 20], ids=lambda n: f"2^{n}")
def test_repeated_runs_on_one_instance_agree(
    cupy_module: Any, field: PrimeField, log_n: int
) -> None:
    cupy = cupy_module
    steps = ntt_cuda.CudaHSteps(log_n, stream=cupy.cuda.Stream(non_blocking=True), field=field)
    first = synthesize(seed=5, index=0, log_n=log_n, field=field)
    second = synthesize(seed=6, index=0, log_n=log_n, field=field)
    h_first = steps.run(*first)
    out = np.empty(1 << log_n, dtype=field.storage)
    a, b, c = (v.astype(field.storage) for v in second)
    h_second = steps.run(a, b, c, out=out)
    assert h_second is out
    assert (steps.run(*first) == h_first).all()
    assert digest(h_second, field=field) == digest(HSteps(log_n, field).run(*second), field=field)


@pytest.mark.gpu
@each_field
@pytest.mark.parametrize("log_n", [1, 2, 5, 11, 12, 16, 20], ids=lambda n: f"2^{n}")
def test_device_tables_are_the_host_tables(cupy_module: Any, field: PrimeField, log_n: int) -> None:
    on_device = transform_tables.device_tables(log_n, field, cupy_module.cuda.Device().id)
    tables = host_tables(log_n, field)
    expected = (tables.forward, tables.backward, tables.coset_up, tables.coset_down)
    got = (on_device.forward, on_device.backward, on_device.coset_up, on_device.coset_down)
    for device_table, table in zip(got, expected, strict=True):
        assert device_table.dtype == field.storage
        assert (device_table.get() == table).all()


@pytest.mark.gpu
def test_a_prover_builds_no_host_tables(cupy_module: Any) -> None:
    from gpu.cuda.prover import build_provers

    host_tables.cache_clear()
    provers = build_provers([0, 0], 13, BABYBEAR)
    assert transform_tables.host_tables.cache_info().currsize == 0
    assert provers[0].steps._device_tables is provers[1].steps._device_tables


@pytest.mark.gpu
def test_phase_rejects_its_own_output_buffer(cupy_module: Any) -> None:
    steps = ntt_cuda.CudaHSteps(10)
    a, b, c = steps.h2d(*synthesize(seed=1, index=0, log_n=10))
    coeffs = steps.intt(a, b, c)
    with pytest.raises(ValueError, match="must not be the buffer this phase writes"):
        steps.intt(*coeffs)
