"""What the commands share: arguments checked as they are parsed, and a progress line."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Collection
from typing import Any, TextIO

from pacer import config
from pacer.runtime import logs


def count(minimum: int = 1) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``minimum`` (``--jobs 0`` is refused with
    "must be at least 1, got 0")."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def seconds(text: str) -> float:
    """An argparse type: a duration in seconds, more than 0 and finite."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text!r}")
    return value


def share(low: float, high: float, *, low_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a number from ``low`` to ``high`` (above ``low`` with ``low_open``),
    as ``--min-busy 0.99`` or ``--holdout 0.3``."""
    rule = f"{'more than' if low_open else 'from'} {low:g} {'and at most' if low_open else 'to'}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (low < value <= high if low_open else low <= value <= high):
            raise argparse.ArgumentTypeError(f"must be a number {rule} {high:g}, got {text!r}")
        return value

    return parse


def size(text: str) -> int:
    """An argparse type: a size in bytes, more than 0, or with a unit (``40GiB``, ``3GB``)."""
    from pydantic import ByteSize, TypeAdapter, ValidationError

    try:
        value = int(TypeAdapter(ByteSize).validate_python(text))
    except ValidationError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(
            f"must be a size in bytes more than 0, or with a unit (40GiB), got {text!r}"
        )
    return value


DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(text: str) -> float:
    """An argparse type: a span of time more than 0, in seconds or with a unit (``90s``,
    ``30m``, ``2h``, ``1d``), in seconds.

    >>> duration("2h"), duration("90")
    (7200.0, 90.0)
    """
    unit = DURATION_UNITS.get(text[-1:], 0.0)
    try:
        value = float(text[:-1] if unit else text) * (unit or 1.0)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"must be a span of time more than 0 (90s, 30m, 2h, 1d), got {text!r}"
        )
    return value


def clock_time(text: str) -> float:
    """An argparse type: a time of day as ISO 8601 (``2026-12-01T10:00``, this host's time
    zone unless it names one: ``+00:00`` or ``Z``), as clock seconds."""
    from datetime import datetime

    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a time as ISO 8601 (2026-12-01T10:00, or with +00:00), got {text!r}"
        ) from None
    return (at if at.tzinfo is not None else at.astimezone()).timestamp()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def param(text: str) -> tuple[str, Any]:
    """An argparse type: ``NAME=VALUE``, the value as JSON (``log_n=18``,
    ``faults=[{"call": "prove", "kind": "raise"}]``) or else a string (``field=goldilocks``).

    >>> param("log_n=18"), param("field=goldilocks")
    (('log_n', 18), ('field', 'goldilocks'))
    """
    name, sep, raw = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"takes NAME=VALUE, got {text!r}")
    try:
        return name, json.loads(raw, parse_constant=_reject_constant)
    except ValueError:
        return name, raw


def add_log_arguments(parser: argparse.ArgumentParser, default_level: str = "info") -> None:
    """``--log-level`` and ``--log-format``, as uvicorn names them."""
    parser.add_argument(
        "--log-level",
        type=str.lower,
        choices=logs.LEVELS,
        default=default_level,
        help=f"the least severe log lines shown ({default_level})",
    )
    parser.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        default="text",
        help="text: one line per event, its context in brackets; json: one object per line, "
        "the context (job, partition, gpu, task) as fields (text)",
    )


class Progress:
    """One line of progress on stderr: rewritten in place on a terminal; elsewhere (a log
    file, a pipe) written when it changed, at most every ``every_s`` unless ``final``."""

    def __init__(
        self,
        stream: TextIO | None = None,
        every_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = every_s
        self.clock = clock
        self.tty = self.stream.isatty()
        self._last = ""
        self._last_at = -math.inf
        self._open = False  # a terminal line not yet ended

    def show(self, text: str, final: bool = False) -> None:
        if self.tty:
            self.stream.write(f"\r{text}\x1b[K")
            self._open = True
            if final:
                self.end()
        elif text != self._last and (final or self.clock() - self._last_at >= self.every_s):
            self.stream.write(text + "\n")
            # After a final line, the next one (of another stage) is written at once.
            self._last, self._last_at = text, -math.inf if final else self.clock()
        self.stream.flush()

    def end(self) -> None:
        """End the line on a terminal, before anything else is printed."""
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False


def load_settings(reads: Collection[str] | None = None) -> config.Settings | None:
    """The settings from the ``PACER_*`` environment; None after printing each problem
    (naming the variable and the rule) to stderr. ``reads``: the settings the command reads
    (`pacer.config.load_settings`); None: all of them."""
    try:
        return config.load_settings(reads)
    except config.SettingsError as exc:
        print("pacer: invalid settings:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return None
