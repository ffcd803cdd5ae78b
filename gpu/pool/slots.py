"""What a pinned pool lends: a `Slot`, laid out by `slot_layout`, and a `SlotBlock`.

A `SlotBlock` says where a shared slot lives, for another process to map.

>>> slot_layout(((1000,), (10, 10)), np.dtype(np.uint64))
(9216, [0, 8192])
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from gpu.pool.allocators import ALIGNMENT_BYTES
from gpu.shm.record import PoolLayout
from gpu.sizes import format_bytes

__all__ = ["Slot", "SlotBlock", "pool_layout", "slot_layout"]


class SlotOwner(Protocol):
    """What a slot goes back to: its pool (`gpu.pool.pinned.PinnedPool`)."""

    def release(self, slot: Slot) -> None: ...


class Slot:
    """One checked-out partition's buffers; give them back with `release` or a ``with`` block.

    The holder writes ``arrays`` in place and must not use them after release. ``index`` is the
    pool slot, or None for a pageable fallback. ``pinned`` is False for a fallback and for NumPy.
    """

    __slots__ = ("_arrays", "_pool", "index", "nbytes", "pinned")

    def __init__(
        self,
        pool: SlotOwner,
        index: int | None,
        arrays: tuple[npt.NDArray[Any], ...],
        nbytes: int,
        pinned: bool,
    ) -> None:
        self._pool = pool
        self._arrays: tuple[npt.NDArray[Any], ...] | None = arrays
        self.index = index
        self.nbytes = nbytes
        self.pinned = pinned

    @property
    def arrays(self) -> tuple[npt.NDArray[Any], ...]:
        """The buffers, one per shape the pool was built with."""
        if self._arrays is None:
            raise RuntimeError(f"{self!r} was released; check out another slot")
        return self._arrays

    @property
    def released(self) -> bool:
        return self._arrays is None

    def release(self) -> None:
        """Give the slot back to its pool (the same as ``pool.release(slot)``)."""
        self._pool.release(self)

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self.released:
            self.release()

    def __repr__(self) -> str:
        where = "pageable fallback" if self.index is None else f"slot {self.index}"
        return f"<Slot {where}, {format_bytes(self.nbytes)}>"


class SlotBlock(NamedTuple):
    """Where a slot lives, for a process that maps it; `SlotBlock.arrays` gives its buffers."""

    name: str  # the shared-memory block
    offsets: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    path: str  # where a process of this host opens it

    def arrays(self, buffer: Any) -> tuple[npt.NDArray[Any], ...]:
        """Views of the slot's buffers in ``buffer`` (the mapped block)."""
        dtype = np.dtype(self.dtype)
        return tuple(
            np.frombuffer(buffer, dtype, math.prod(shape), offset).reshape(shape)
            for shape, offset in zip(self.shapes, self.offsets, strict=True)
        )


def pool_layout(
    shapes: tuple[tuple[int, ...], ...], dtype: npt.DTypeLike, field: str | None = None
) -> PoolLayout:
    """The layout of slots of ``shapes`` arrays of ``dtype``, as an owner record keeps it."""
    dtype = np.dtype(dtype)
    slot_bytes, offsets = slot_layout(shapes, dtype)
    return PoolLayout(slot_bytes, tuple(offsets), shapes, dtype.str, field)


def slot_layout(shapes: tuple[tuple[int, ...], ...], dtype: np.dtype[Any]) -> tuple[int, list[int]]:
    """A slot's size in bytes and each array's offset in it, every one ALIGNMENT_BYTES-aligned."""
    if not shapes:
        raise ValueError("slot_shapes must name at least one array shape, got none")
    offsets = []
    end = 0
    for shape in shapes:
        if not shape or any(d < 1 for d in shape):
            raise ValueError(f"every slot shape needs dimensions of at least 1, got {shape}")
        offsets.append(end)
        end += -(-math.prod(shape) * dtype.itemsize // ALIGNMENT_BYTES) * ALIGNMENT_BYTES
    return end, offsets
