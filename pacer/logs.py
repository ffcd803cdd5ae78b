"""Log lines with their context: job, partition, GPU and task when a record carries them."""

from __future__ import annotations

import logging
import sys

CONTEXT = ("job", "partition", "gpu", "task")


class ContextFormatter(logging.Formatter):
    """``2026-11-30 12:00:00,123 INFO pacer.service job completed [job=ab12 partition=3]``."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = " ".join(
            f"{key}={getattr(record, key)}"
            for key in CONTEXT
            if getattr(record, key, None) is not None
        )
        return f"{line} [{context}]" if context else line


def setup(level: str = "INFO") -> None:
    """Log to stderr with context; called by the CLI only (building objects never does)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ContextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
