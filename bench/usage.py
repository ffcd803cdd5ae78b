"""Command lines of the benchmarks, from their module docstrings."""

from __future__ import annotations

import argparse


def doc_parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser whose description is the first line of ``doc`` and whose epilog is the rest
    (from its third line), kept as written.

    >>> doc_parser("Time one thing.\\n\\n    python -m bench.x").description
    'Time one thing.'
    """
    lines = (doc or "").splitlines()
    return argparse.ArgumentParser(
        description=lines[0] if lines else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(lines[2:]),
    )
