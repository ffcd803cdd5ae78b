"""The engine protocol's messages: what an engine sends, checked, and what pacer answers.

Every message is one JSON object in one WebSocket text frame, its kind in ``type``
(docs/engine-protocol.md is the specification). Parsing is pure: `parse_hello` and
`parse_event` return frozen records or raise `ProtocolError`, which names the rule broken and
the field, and becomes an ``error`` message on the stream.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Final

PROTOCOL_VERSION: Final = 1
MAX_NAME = 128  # characters of an engine's name, a partition's id, a workload key
MAX_WORKERS = 4096
MAX_COUNT = 1_000_000_000

# What an engine sends after its hello, with the fields each one takes (beside type and seq).
EVENTS: Final[dict[str, tuple[str, ...]]] = {
    "dispatched": ("partition",),
    "declined": ("count",),
    "synthesis_started": ("partition",),
    "synthesis_ready": ("partition", "synthesis_s"),
    "synthesis_failed": ("partition", "elapsed_s"),
    "gpu_started": ("partition", "worker"),
    "gpu_finished": ("partition", "worker", "gpu_s"),
    "dropped": ("partition",),
    "worker_up": ("worker",),
    "worker_down": ("worker",),
    "backlog": ("partitions",),
    "bye": (),
}
OPTIONAL: Final = frozenset({"reason", "device"})
# Fields one kind of event may carry besides its own (and OPTIONAL's).
EXTRA: Final[dict[str, tuple[str, ...]]] = {"synthesis_ready": ("compute_s",)}


class ProtocolError(Exception):
    """A message breaks a rule of the protocol: ``code`` (a word the spec lists), the
    ``rule`` in words, the ``field`` at fault (None: the message as a whole) and the ``seq``
    of the event refused, where it had one."""

    def __init__(self, code: str, rule: str, field: str | None = None, seq: int | None = None):
        super().__init__(f"{code}: {rule}")
        self.code = code
        self.rule = rule
        self.field = field
        self.seq = seq

    def message(self) -> dict[str, Any]:
        """The ``error`` message telling the engine."""
        return {
            "type": "error",
            "code": self.code,
            "message": self.rule,
            "field": self.field,
            "seq": self.seq,
        }


@dataclass(frozen=True)
class Shape:
    """An engine as it declares itself: its GPU workers (and the device of each), bytes one
    partition holds from dispatch to the end of its GPU work, its memory budget (bytes) and
    how many syntheses it runs at once."""

    gpu_workers: int
    partition_bytes: int
    memory_budget_bytes: int
    synthesis_slots: int
    devices: tuple[int, ...] = ()

    @property
    def inflight_cap(self) -> int:
        """Partitions the memory budget holds at once (at least one)."""
        return max(1, self.memory_budget_bytes // self.partition_bytes)


@dataclass(frozen=True)
class Fallback:
    """What the engine does while pacer is gone: ``hold`` its last decided rate, or keep at
    most ``inflight`` partitions in flight (``cap``)."""

    mode: str = "hold"
    inflight: int | None = None


@dataclass(frozen=True)
class Hello:
    """The first message of a connection: who the engine is, its shape, its fallback, and
    the session it resumes (``resume``: its id and token), if any."""

    engine: str
    workload_key: str
    shape: Shape
    fallback: Fallback = field(default_factory=Fallback)
    resume: tuple[str, str] | None = None


@dataclass(frozen=True)
class Event:
    """An event after the hello: its ``kind`` (a key of `EVENTS`), its ``seq`` and fields."""

    kind: str
    seq: int
    partition: str | None = None
    worker: int | None = None
    seconds: float | None = None  # synthesis_s, elapsed_s or gpu_s; None: not measured
    compute_s: float | None = None  # synthesis_ready: the part of synthesis_s in a slot
    count: int | None = None  # declined: count; backlog: partitions


def decode(text: str | bytes) -> dict[str, Any]:
    """One frame's JSON object; ProtocolError ``malformed`` for anything else."""
    try:
        message = json.loads(text, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError("malformed", f"a frame must be one JSON object: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("malformed", "a frame must be one JSON object")
    return message


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def parse_hello(message: dict[str, Any]) -> Hello:
    """The hello in ``message``; ProtocolError naming the field otherwise (``version`` for
    a protocol version this pacer does not speak)."""
    if message.get("type") != "hello":
        raise ProtocolError("hello_expected", "the first message must have type hello", "type")
    version = message.get("protocol")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            "version",
            f"this pacer speaks protocol {PROTOCOL_VERSION}, the hello asks for {version!r}",
            "protocol",
        )
    _only(message, {"type", "protocol", "engine", "workload_key", "shape", "fallback", "resume"})
    shape = _object(message, "shape")
    _only(
        shape,
        {"gpu_workers", "partition_bytes", "memory_budget_bytes", "synthesis_slots", "devices"},
        "shape.",
    )
    workers = _int(shape, "gpu_workers", 1, MAX_WORKERS, "shape.")
    devices = shape.get("devices", [])
    if (
        not isinstance(devices, list)
        or len(devices) not in (0, workers)
        or not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < MAX_WORKERS for d in devices
        )
    ):
        raise ProtocolError(
            "malformed",
            f"devices must list one device index (0 to {MAX_WORKERS - 1}) per GPU worker",
            "shape.devices",
        )
    size = _int(shape, "partition_bytes", 1, 2**60, "shape.")
    budget = _int(shape, "memory_budget_bytes", size, 2**62, "shape.")
    slots = _int(shape, "synthesis_slots", 1, MAX_WORKERS, "shape.")
    return Hello(
        engine=_name(message, "engine"),
        workload_key=_name(message, "workload_key", limit=4096),
        shape=Shape(workers, size, budget, slots, tuple(devices)),
        fallback=_fallback(message.get("fallback", {"mode": "hold"})),
        resume=_resume(message.get("resume")),
    )


def _fallback(value: object) -> Fallback:
    if not isinstance(value, dict):
        raise ProtocolError("malformed", "fallback must be an object", "fallback")
    _only(value, {"mode", "inflight"}, "fallback.")
    mode = value.get("mode")
    if mode == "hold" and "inflight" not in value:
        return Fallback("hold")
    if mode == "cap":
        return Fallback("cap", _int(value, "inflight", 1, MAX_COUNT, "fallback."))
    raise ProtocolError(
        "malformed",
        'fallback must be {"mode": "hold"} or {"mode": "cap", "inflight": n}',
        "fallback.mode",
    )


def _resume(value: object) -> tuple[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ProtocolError("malformed", "resume must be an object", "resume")
    _only(value, {"session", "token"}, "resume.")
    return _name(value, "session", prefix="resume."), _name(value, "token", prefix="resume.")


def parse_event(message: dict[str, Any], expected_seq: int) -> Event:
    """The event in ``message``. ``seq`` must be ``expected_seq``: a lower one is a repeat
    (ProtocolError ``repeat``, which the session ignores), a higher one ``out_of_order``."""
    kind = message.get("type")
    if kind not in EVENTS:
        raise ProtocolError(
            "malformed",
            f"type must be one of {', '.join(EVENTS)}, got {str(kind)[:40]!r}",
            "type",
            _seq_of(message),
        )
    seq = _int(message, "seq", 1, 2**62)
    if seq < expected_seq:
        raise ProtocolError("repeat", f"seq {seq} was already taken in", "seq", seq)
    if seq > expected_seq:
        raise ProtocolError(
            "out_of_order",
            f"seq must be {expected_seq}, the next after the last taken in; got {seq}",
            "seq",
            seq,
        )
    fields = EVENTS[kind]
    try:
        _only(message, {"type", "seq", *fields, *OPTIONAL, *EXTRA.get(kind, ())})
        seconds = _seconds(message, fields)
        return Event(
            kind,
            seq,
            partition=_name(message, "partition") if "partition" in fields else None,
            worker=_int(message, "worker", 0, MAX_WORKERS - 1) if "worker" in fields else None,
            seconds=seconds,
            count=_count(message, kind),
            compute_s=_compute(message, seconds),
        )
    except ProtocolError as exc:
        exc.seq = seq
        raise


def _seconds(message: dict[str, Any], fields: tuple[str, ...]) -> float | None:
    """The duration the event carries (s); None where it is null: not measured (a partition
    re-declared after a fresh session)."""
    for name in ("synthesis_s", "elapsed_s", "gpu_s"):
        if name in fields:
            if name not in message:
                raise ProtocolError("malformed", f"{name} is missing (null: not measured)", name)
            value = message[name]
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ProtocolError("malformed", f"{name} must be a number of seconds", name)
            if not math.isfinite(value) or not 0 < value <= 1e6:
                raise ProtocolError(
                    "malformed",
                    f"{name} must be above 0 and at most 1e6 seconds, got {value}",
                    name,
                )
            return float(value)
    return None


def _compute(message: dict[str, Any], synthesis_s: float | None) -> float | None:
    """A ready synthesis's time in its slot (s), at most its ``synthesis_s``; None where the
    engine does not say, or where ``synthesis_s`` is null."""
    value = message.get("compute_s")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ProtocolError("malformed", "compute_s must be a number of seconds", "compute_s")
    if synthesis_s is None:
        return None
    if not 0 <= value <= synthesis_s:
        raise ProtocolError(
            "malformed",
            f"compute_s must be from 0 to synthesis_s ({synthesis_s}), got {value}",
            "compute_s",
        )
    return float(value)


def _count(message: dict[str, Any], kind: str) -> int | None:
    if kind == "declined":
        return _int(message, "count", 1, MAX_COUNT)
    if kind == "backlog":
        return _int(message, "partitions", 0, MAX_COUNT)
    return None


def _seq_of(message: dict[str, Any]) -> int | None:
    seq = message.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def _only(message: dict[str, Any], allowed: set[str], prefix: str = "") -> None:
    unknown = sorted(set(message) - allowed)
    if unknown:
        raise ProtocolError(
            "malformed",
            f"unknown field {prefix}{unknown[0]} (this message takes {', '.join(sorted(allowed))})",
            prefix + unknown[0],
        )


def _object(message: dict[str, Any], name: str) -> dict[str, Any]:
    value = message.get(name)
    if not isinstance(value, dict):
        raise ProtocolError("malformed", f"{name} must be an object", name)
    return value


def _int(message: dict[str, Any], name: str, low: int, high: int, prefix: str = "") -> int:
    value = message.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProtocolError(
            "malformed",
            f"{prefix}{name} must be an integer from {low} to {high}, got {str(value)[:40]}",
            prefix + name,
        )
    return value


def _name(message: dict[str, Any], name: str, *, limit: int = MAX_NAME, prefix: str = "") -> str:
    value = message.get(name)
    if not isinstance(value, str) or not 0 < len(value) <= limit or not value.isprintable():
        raise ProtocolError(
            "malformed",
            f"{prefix}{name} must be a string of 1 to {limit} printable characters",
            prefix + name,
        )
    return value
