"""Plain-text tables for terminals and for bench/RESULTS.md (Markdown pipes)."""

from __future__ import annotations

from collections.abc import Sequence


def render(headers: Sequence[str], rows: Sequence[Sequence[object]], markdown: bool = False) -> str:
    """Columns aligned to their widest cell; numbers right-aligned.

    >>> print(render(["policy", "busy"], [["pi", "0.99"]]))
    policy  busy
    ------  ----
    pi      0.99
    """
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    numeric = [all(_is_number(r[i]) for r in cells) and bool(cells) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return ("| " + " | ".join(parts) + " |") if markdown else "  ".join(parts).rstrip()

    rule = (
        "|" + "|".join(("-" * (w + 1) + ":") if n else ("-" * (w + 2)) for w, n in
                       zip(widths, numeric, strict=True)) + "|"
        if markdown
        else "  ".join("-" * w for w in widths)
    )  # fmt: skip
    return "\n".join([line(list(headers)), rule, *(line(r) for r in cells)])


def clip(text: str, most: int) -> str:
    """``text`` on one line, cut to ``most`` characters with an ellipsis where it is longer.

    >>> clip("partition 3 failed: out of memory", 24)
    'partition 3 failed: out…'
    """
    flat = " ".join(text.split())
    return flat if len(flat) <= most else flat[: most - 1].rstrip() + "…"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return text in ("-", "")
    return True
