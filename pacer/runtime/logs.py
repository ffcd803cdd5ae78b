"""Log lines with their context: job, partition, GPU and task when a record carries them.

Two formats: ``text`` for people (one line, the context in brackets) and ``json`` for log
pipelines (one object a line, the context as fields).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

CONTEXT = ("job", "partition", "gpu", "task")
FORMATS = ("text", "json")
LEVELS = ("critical", "error", "warning", "info", "debug")


def _context(record: logging.LogRecord) -> dict[str, object]:
    return {key: getattr(record, key) for key in CONTEXT if getattr(record, key, None) is not None}


class ContextFormatter(logging.Formatter):
    """``2026-11-30 12:00:00,123 INFO pacer.service job completed [job=ab12 partition=3]``."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = " ".join(f"{key}={value}" for key, value in _context(record).items())
        return f"{line} [{context}]" if context else line


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``,
    the context fields the record carries (``job``, ``partition``, ``gpu``, ``task``) and
    ``exception`` (the traceback) when there is one.

    ``{"time": "2026-11-30T12:00:00.123+00:00", "level": "INFO", "logger": "pacer.service",
    "message": "job completed: 3ffb…", "job": "e2b650d3a5c34dfd"}``
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_context(record),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        # default=str: a context value of another type (a GPU's label object) still logs.
        return json.dumps(entry, default=str, ensure_ascii=False)


def setup(level: str = "info", log_format: str = "text") -> None:
    """Log to stderr with context, as ``text`` or ``json``; called by the CLI only (building
    objects never does)."""
    if log_format not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(ContextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # The PostgreSQL pool warns at each reconnection attempt while the server is out of
    # reach; the journal's health says it once, then once a minute.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
