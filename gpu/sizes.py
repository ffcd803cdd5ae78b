"""Byte counts and rates as the logs and errors print them.

>>> format_bytes(6 * 2**30), format_bytes(512), format_rate(2**31, 1.0), format_rate(1, 0)
('6.0 GiB', '512 B', '2.0 GiB/s', 'instant')
"""

from __future__ import annotations

__all__ = ["format_bytes", "format_rate"]


def format_bytes(nbytes: float) -> str:
    """``nbytes`` in the largest binary unit that keeps it at or above 1 (B to TiB)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(nbytes) < 1024:
            return f"{nbytes:.0f} B" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} TiB"


def format_rate(nbytes: int, seconds: float) -> str:
    """``nbytes`` moved in ``seconds``, per second; "instant" when no time passed."""
    return f"{format_bytes(nbytes / seconds)}/s" if seconds > 0 else "instant"
