"""Prime fields for the NTT workload: what every field shares, over NumPy uint64 arrays.

A `PrimeField` holds canonical elements, integers in [0, p). Each field supplies add, sub, mul,
random draws and CUDA device functions; the rest is built on those. The arithmetic trusts its
inputs. `PrimeField.to_field` and `PrimeField.from_le_bytes` check outside data.

>>> from gpu.field import by_name
>>> F = by_name("goldilocks")
>>> F.to_ints(F.mul(F.to_field([2, F.P - 1]), F.to_field([3, F.P - 1])))
[6, 1]
"""

from __future__ import annotations

import builtins
import math
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

__all__ = ["FieldArray", "PrimeField"]

FieldArray = npt.NDArray[np.uint64]
"""An array of canonical field elements."""

# batch_inverse: shorter inputs are inverted in plain Python; longer ones as a matrix with rows
# of at least _MIN_ROW_LENGTH elements.
_SCALAR_INVERSE_LIMIT = 64
_MIN_ROW_LENGTH = 2048
_LOW_32 = np.uint64(0xFFFFFFFF)


class PrimeField:
    """A prime field with a large power-of-two subgroup; subclasses set constants and arithmetic."""

    name: ClassVar[str]
    P: ClassVar[int]
    GENERATOR: ClassVar[int]
    """Generates the multiplicative group (order p − 1); also the coset shift of the H step."""
    TWO_ADICITY: ClassVar[int]
    """The largest k with 2^k dividing p − 1: the longest power-of-two NTT is 2^k."""
    storage: ClassVar[np.dtype[Any]]
    """The narrowest unsigned dtype holding an element: pool slots and device vectors use it."""
    MUL_BUFFERS: ClassVar[int]
    """Scratch arrays `mul_into` needs, each as long as its inputs."""
    CONSECUTIVE_BUFFERS: ClassVar[int]
    """Scratch arrays `consecutive_products` needs, each as long as its window."""
    CUDA: ClassVar[str]
    """CUDA C++ defining ``fmul``, ``fadd``, ``fsub`` on ``elem`` (the storage type), which
    `gpu.cuda.kernels.cuda_source` defines before it with ``FIELD_P``, the prime."""

    def add(self, a: FieldArray, b: FieldArray | np.uint64) -> FieldArray:
        """(a + b) mod p, elementwise; ``b`` may be one element that broadcasts."""
        raise NotImplementedError

    def sub(self, a: FieldArray, b: FieldArray | np.uint64) -> FieldArray:
        """(a − b) mod p, elementwise; ``b`` may be one element that broadcasts."""
        raise NotImplementedError

    def mul(self, a: FieldArray, b: FieldArray | np.uint64) -> FieldArray:
        """(a · b) mod p, elementwise; ``b`` may be one element that broadcasts."""
        raise NotImplementedError

    def mul_into(
        self,
        a: FieldArray,
        b: FieldArray,
        out: npt.NDArray[Any],
        buffers: tuple[FieldArray, ...],
    ) -> None:
        """out = (a · b) mod p without allocating: ``buffers`` are `MUL_BUFFERS` uint64 arrays
        of a's length, overwritten; ``out`` (storage or uint64 dtype) may not alias a or b."""
        raise NotImplementedError

    def consecutive_products(
        self, window: FieldArray, out: npt.NDArray[Any], buffers: tuple[FieldArray, ...]
    ) -> None:
        """out[i] = window[i] · window[i + 1] mod p without allocating: ``out`` is one element
        shorter than ``window``; ``buffers`` are `CONSECUTIVE_BUFFERS` uint64 arrays at least
        as long as ``window``, overwritten. Synthesis makes c so, b being a shifted by one."""
        self.mul_into(window[:-1], window[1:], out, tuple(b[: out.size] for b in buffers))

    def random_elements(self, bits: np.random.BitGenerator, out: npt.NDArray[Any]) -> None:
        """Fills ``out`` (the storage dtype) with elements drawn from the raw stream of
        ``bits``, allocating nothing beyond the draws themselves (a fresh megabyte-sized
        temporary per call costs more page faults than the arithmetic)."""
        raise NotImplementedError

    def butterflies(
        self,
        low: FieldArray,
        high: FieldArray,
        twiddle: FieldArray,
        product_buffer: FieldArray,
        scratch_buffer: FieldArray,
    ) -> None:
        """In place: (low, high) ← (low + w·high, low − w·high) mod p; the buffers hold
        low.size elements (a field may use them to avoid temporaries)."""
        product = self.mul(high, twiddle)
        high[...] = self.sub(low, product)
        low[...] = self.add(low, product)

    def pow(self, base: int, exponent: int) -> int:
        """base^exponent mod p for one element; a negative exponent raises the inverse."""
        self._check_element("base", base)
        if exponent < 0 and base == 0:
            raise ValueError("0 has no inverse, so it cannot be raised to a negative power")
        return builtins.pow(base, exponent, self.P)

    def inverse(self, value: int) -> int:
        """The element x with value · x = 1 mod p."""
        self._check_element("value", value)
        if value == 0:
            raise ValueError("0 has no inverse")
        return builtins.pow(value, -1, self.P)

    def batch_inverse(self, values: FieldArray) -> FieldArray:
        """The inverse of every element, by Montgomery's trick: one field inversion for them all.

        The elements are laid out as a matrix of at most √n rows. A pass down the rows keeps
        each column's running product; the column totals are inverted the same way,
        recursively; a pass back up peels each element's inverse off its running product.
        About three multiplications per element, in whole-row numpy calls. Raises if an
        element is 0.
        """
        flat = np.ravel(values)
        zeros = np.flatnonzero(flat == 0)
        if zeros.size:
            raise ValueError(f"0 has no inverse; values[{zeros[0]}] is 0")
        return self._batch_inverse(flat).reshape(np.shape(values))

    def root_of_unity(self, log_n: int) -> int:
        """A primitive 2^log_n-th root of unity: its powers 0 .. 2^log_n − 1 are distinct."""
        if not 0 <= log_n <= self.TWO_ADICITY:
            raise ValueError(f"log_n must be between 0 and {self.TWO_ADICITY}, got {log_n}")
        return builtins.pow(self.GENERATOR, (self.P - 1) >> log_n, self.P)

    def powers(self, base: int, count: int) -> FieldArray:
        """[1, base, base², …, base^(count−1)] mod p, built by doubling (log2(count) passes)."""
        self._check_element("base", base)
        if count < 0:
            raise ValueError(f"count must be non-negative, got {count}")
        result = np.ones(min(count, 1), dtype=np.uint64)
        while result.size < count:
            step = np.uint64(builtins.pow(base, result.size, self.P))
            result = np.concatenate([result, self.mul(result[: count - result.size], step)])
        return result

    def to_field(self, values: npt.ArrayLike) -> FieldArray:
        """Canonical elements as a uint64 array; raises unless every value is an integer in
        [0, p). Returns ``values`` itself when it already is a uint64 array."""
        array = np.asarray(values)
        if array.size == 0:
            return array.astype(np.uint64)
        if array.dtype.kind in "fO" and not isinstance(values, np.ndarray):
            # Python ints past 2^63 beside small ones: numpy picks float64 or object for them.
            boxed = np.asarray(values, dtype=object)
            if all(isinstance(v, int | np.integer) for v in boxed.flat):
                array = boxed
        if array.dtype.kind not in "iuO":
            raise ValueError(
                f"field elements must be integers in {self._range}, got dtype {array.dtype}"
            )
        if array.dtype.kind == "O":
            bad = np.array([not 0 <= v < self.P for v in array.flat]).reshape(array.shape)
        elif int(array.max()) >= self.P or (array.dtype.kind == "i" and array.min() < 0):
            bad = (array < 0) | (array >= self.P) if array.dtype.kind == "i" else array >= self.P
        else:
            return array.astype(np.uint64, copy=False)
        if bad.any():
            index = np.unravel_index(int(np.argmax(bad)), array.shape)
            where = ", ".join(map(str, index))
            raise ValueError(
                f"field elements must be in {self._range}, got {array[index]} at index [{where}]"
            )
        return array.astype(np.uint64, copy=False)

    def reduce(self, values: npt.ArrayLike) -> FieldArray:
        """Any integers (signed or unsigned, up to 64 bits) reduced mod p into canonical
        elements."""
        array = np.asarray(values)
        if array.size == 0:
            return array.astype(np.uint64)
        if array.dtype.kind not in "iu":
            raise ValueError(f"only integers can be reduced mod p, got dtype {array.dtype}")
        if array.dtype.kind == "i":
            signed = array.astype(np.int64, copy=False)
            # Negative x: −|x| mod p = p − (|x| mod p), computed on the magnitude in uint64.
            magnitude = np.mod(np.abs(signed).astype(np.uint64), np.uint64(self.P))
            flipped = self.sub(np.zeros_like(magnitude), magnitude)
            return np.where(signed < 0, flipped, magnitude)
        return np.mod(array.astype(np.uint64, copy=False), np.uint64(self.P))

    def sum(self, values: FieldArray) -> int:
        """Σ values mod p, exactly (the uint64 sum of 32-bit halves never overflows)."""
        flat = np.ravel(values)
        low = int(np.bitwise_and(flat, _LOW_32).sum(dtype=np.uint64))
        high = int(np.right_shift(flat, np.uint64(32)).sum(dtype=np.uint64))
        return (low + (high << 32)) % self.P

    @staticmethod
    def to_ints(values: FieldArray) -> list[int]:
        """The elements as Python ints, for exact arithmetic and comparisons in plain Python."""
        return [int(v) for v in np.asarray(values).ravel()]

    def to_le_bytes(self, values: npt.ArrayLike) -> bytes:
        """The canonical encoding: each element little-endian in the storage width, C order."""
        return self.to_field(values).astype(self.storage.newbyteorder("<")).tobytes()

    def from_le_bytes(self, data: bytes) -> FieldArray:
        """The inverse of `to_le_bytes`: little-endian words, each checked to be below p."""
        width = self.storage.itemsize
        if len(data) % width:
            raise ValueError(f"byte length must be a multiple of {width}, got {len(data)}")
        words = np.frombuffer(data, dtype=self.storage.newbyteorder("<"))
        return self.to_field(words.astype(np.uint64))

    def __repr__(self) -> str:
        return f"<field {self.name}, p = {self.P}>"

    def __reduce__(self) -> str:
        # One instance per field: pickled by reference to its module's constant (BABYBEAR,
        # GOLDILOCKS), so a field sent to a worker process is that process's own instance.
        return self.name.upper()

    @property
    def _range(self) -> str:
        return f"[0, {self.P})"

    def _check_element(self, name: str, value: int) -> None:
        if not 0 <= value < self.P:
            raise ValueError(f"{name} must be a field element in {self._range}, got {value}")

    def _batch_inverse(self, values: FieldArray) -> FieldArray:
        """`batch_inverse` of a flat array of nonzero elements."""
        size = values.size
        if size <= _SCALAR_INVERSE_LIMIT:
            return np.array(self._scalar_batch_inverse(self.to_ints(values)), dtype=np.uint64)
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
            prefix[j] = self.mul(prefix[j - 1], matrix[j])
        inverse_prefix = self._batch_inverse(prefix[-1])
        for j in range(rows - 1, 0, -1):
            prefix[j] = self.mul(inverse_prefix, prefix[j - 1])
            inverse_prefix = self.mul(inverse_prefix, matrix[j])
        prefix[0] = inverse_prefix
        return prefix.reshape(rows * cols)[:size]

    def _scalar_batch_inverse(self, values: list[int]) -> list[int]:
        """Montgomery's trick in plain Python ints, for short inputs."""
        p = self.P
        running = [1]
        for value in values:
            running.append(running[-1] * value % p)
        inverse_running = builtins.pow(running[-1], -1, p)
        inverses = [0] * len(values)
        for i in range(len(values) - 1, -1, -1):
            inverses[i] = inverse_running * running[i] % p
            inverse_running = inverse_running * values[i] % p
        return inverses
