"""Prime fields for NTTs: `PrimeField` and the two shipped fields, BabyBear and Goldilocks."""

from __future__ import annotations

from gpu.field.prime import PrimeField

__all__ = ["FIELD_NAMES", "by_name"]

FIELD_NAMES = ("babybear", "goldilocks")
"""The fields `by_name` knows."""


def by_name(name: str) -> PrimeField:
    """The field called ``name`` (one of `FIELD_NAMES`); raise ValueError for any other name."""
    if name == "babybear":
        from gpu.field.babybear import BABYBEAR

        return BABYBEAR
    if name == "goldilocks":
        from gpu.field.goldilocks import GOLDILOCKS

        return GOLDILOCKS
    raise ValueError(f"field must be one of {', '.join(FIELD_NAMES)}, got {name!r}")
