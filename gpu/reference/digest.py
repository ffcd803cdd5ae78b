"""A fingerprint of a vector of field elements, to compare results: CPU with GPU, run with run.

Element i is folded by FNV-1a/64 into lane i mod L, L = min(n, `DIGEST_LANES`). The digest is
SHA-256 of n and the lanes. A GPU computes the lanes in one pass and copies back 8·L bytes.

>>> from gpu.field.babybear import BABYBEAR
>>> digest([1, 2, 3, 4]) == digest([1, 2, 3, 4], field=BABYBEAR) != digest([1, 2, 4, 3])
True
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

from gpu.field.babybear import BABYBEAR
from gpu.field.prime import FieldArray, PrimeField

__all__ = ["DIGEST_LANES", "FNV_OFFSET", "FNV_PRIME", "digest", "digest_lanes", "digest_of_lanes"]

DIGEST_LANES = 1 << 16
"""Independent FNV-1a lanes of `digest` (fewer when n is smaller): element i feeds lane
i mod lanes, so a GPU reads the vector coalesced, one thread per lane."""
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def digest(h: npt.ArrayLike, *, field: PrimeField = BABYBEAR) -> str:
    """Hex fingerprint of a vector of field elements; not collision-resistant."""
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
