"""MkDocs hook: headings get the anchors GitHub gives them, so a link into a page works both on
GitHub and on the built site (tests/test_docs_site.py checks every link against these)."""

from __future__ import annotations

import unicodedata
from typing import Any


def anchor(value: str, separator: str = "-") -> str:
    """The anchor GitHub gives a heading's text: lower case, every character but letters, marks,
    digits, spaces, hyphens and underscores dropped, each space ``separator``."""
    kept = (ch for ch in value.lower() if ch in " -_" or unicodedata.category(ch)[0] in "LMN")
    return "".join(kept).replace(" ", separator)


def on_config(config: Any) -> Any:
    """Make the table-of-contents extension name headings with :func:`anchor`."""
    config.mdx_configs.setdefault("toc", {})["slugify"] = anchor
    return config
