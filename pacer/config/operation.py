"""How the service runs: its HTTP API, shutdown, each call's time limit, retries and health
(``PACER_API__*``, ``PACER_SHUTDOWN__*``, ``PACER_TIMEOUTS__*``, ``PACER_RETRY__*``,
``PACER_HEALTH__*``); the journal's section is `pacer.config.journal`."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from pydantic import Field, SecretStr, field_validator

from pacer.config.section import Section

MIN_TOKEN_CHARS = 16
MAX_TOKEN_CHARS = 4096


class ListenError(OSError):
    """The HTTP API could not listen on its address (a port in use, an address not of this
    host); ``str()`` says which, why, and what sets them."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        super().__init__(
            f"cannot listen on {host}:{port}: {reason} (the address: --host or "
            "PACER_API__HOST; the port: --port or PACER_API__PORT)"
        )
        self.host, self.port, self.reason = host, port, reason


class ApiSettings(Section):
    """The HTTP API: jobs, status, controller, metrics and health."""

    host: str = Field(
        "127.0.0.1",
        min_length=1,
        max_length=253,
        description="Address to listen on; a non-loopback one needs a token or allow_public "
        "(address)",
    )
    port: int = Field(9470, ge=0, le=65535, description="TCP port; 0 picks a free one (port)")
    token: SecretStr | None = Field(
        None,
        description=f"Bearer token required by the endpoints that change state, at least "
        f"{MIN_TOKEN_CHARS} visible ASCII characters (e.g. openssl rand -hex 32); unset: none "
        "(secret)",
    )
    allow_public: bool = Field(
        False,
        description="Allow a non-loopback address without a token (true/false)",
    )
    allowed_hosts: str = Field(
        "",
        max_length=4096,
        description="Host names the API answers to besides localhost, IP addresses and "
        "PACER_API__HOST, comma-separated; * for any. A request whose Host or Origin names "
        "another is refused (421, 403): a web page cannot reach pacer by a name of its own "
        "that resolves to it (DNS rebinding) (names)",
    )
    max_body_bytes: int = Field(
        65536, ge=1024, le=16 * 2**20, description="Largest request body accepted (bytes)"
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="A request line and headers must arrive complete within this time of the "
        "connection opening, or of their first byte; else the connection is closed (s)",
    )
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="A request body must arrive complete within this time of the handler "
        "starting to read it; else 408 and the connection is closed (s)",
    )
    keepalive_timeout_s: float = Field(
        15.0,
        gt=0,
        le=3600,
        description="An idle connection between two requests is closed after this time (s)",
    )
    max_reads: int = Field(
        16,
        ge=0,
        le=10_000,
        description="Reads (GET and HEAD but the probes and /metrics) answered at once; one "
        "more gets 503 with Retry-After at once, so that writes keep their share of the event "
        "loop and the journal's thread; writes are never refused for it; 0: no limit "
        "(requests)",
    )
    max_backlog: int = Field(
        4_000_000,
        ge=1,
        le=100_000_000,
        description="Most partitions waiting to be dispatched (held as runs of indices: at "
        "most 16 bytes of service memory each); a job that would exceed it gets 429 with "
        "Retry-After (partitions)",
    )

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, value: str) -> str:
        for name in (part.strip() for part in value.split(",")):
            if name and name != "*" and not re.fullmatch(r"[A-Za-z0-9._-]+", name):
                raise ValueError(
                    f"must be host names (letters, digits, '.', '-', '_') or *, comma-separated; "
                    f"got {name[:100]!r}"
                )
        return value

    @property
    def host_names(self) -> frozenset[str]:
        """``allowed_hosts`` as lower-case names, without a trailing dot."""
        return frozenset(
            part.strip().lower().rstrip(".") for part in self.allowed_hosts.split(",")
            if part.strip()
        )  # fmt: skip

    def bind_problem(self, host_named: str = "PACER_API__HOST") -> str | None:
        """Why the service may not listen on ``host``: a non-loopback address without a
        token, unless ``allow_public``; None where it may. ``host_named``: what set the
        address, for the message (the variable, or ``--host``)."""
        try:
            loopback = ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            loopback = self.host == "localhost"
        if loopback or self.token is not None or self.allow_public:
            return None
        return (
            f"{host_named} {self.host} is not a loopback address: set PACER_API__TOKEN, or "
            "PACER_API__ALLOW_PUBLIC=true to serve it without authentication"
        )

    @field_validator("token")
    @classmethod
    def _token_strong_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        secret = value.get_secret_value()
        # Refuse without echoing the token: this message is printed and logged.
        if len(secret) < MIN_TOKEN_CHARS:
            raise ValueError(
                f"must be at least {MIN_TOKEN_CHARS} characters, got {len(secret)} (a random "
                "one: openssl rand -hex 32); leave it unset for no token"
            )
        if len(secret) > MAX_TOKEN_CHARS or not re.fullmatch(r"[\x21-\x7e]+", secret):
            raise ValueError(
                f"must be visible ASCII characters without spaces, at most {MAX_TOKEN_CHARS} "
                "(it is sent in an HTTP header)"
            )
        return value


CLOSE_WORKLOAD_S = 30.0
"""At shutdown, how long the workload's close (pool, processes) may take beyond the drain
before the service exits anyway; `pacer run` waits for its child that much longer too."""


class ShutdownSettings(Section):
    """SIGTERM handling."""

    drain_s: float = Field(
        60.0,
        ge=0,
        le=86400,
        description="On SIGTERM, how long in-flight work may finish before the rest is left "
        "to the journal (s)",
    )
    journal_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="On SIGTERM, how long the last commit may still wait for the journal once "
        "the drain budget is spent, and the longest the requests still answered and the "
        "journal's close may take; a journal call running past it is not waited for: one "
        "error names it, what was not committed is proved again on the next start, and the "
        "exit status is 1 (s)",
    )

    @property
    def longest_stop_s(self) -> float:
        """The longest a stop takes (s): the drain budget; past it, the last commit's wait for
        the journal, the workload's close where calls are in flight or hung
        (`CLOSE_WORKLOAD_S`), the requests still answered and the journal's close. A workload
        whose calls all returned may take longer to free a large pinned pool."""
        return self.drain_s + 3 * self.journal_s + CLOSE_WORKLOAD_S


def _call_limit(call: str, floor: str, estimate: str, replaced: str | None) -> Any:
    """The time limit of one ``call`` (s), up to a day; 0: max(``floor``, estimate_multiple ×
    the ``estimate`` estimate). ``replaced``: what is replaced when the call overruns."""
    then = "" if replaced is None else f" and its {replaced} is replaced"
    return Field(
        0.0,
        ge=0,
        le=86400,
        description=f"Longest one {call} may run before its attempt fails{then}; 0: "
        f"max({floor}, estimate_multiple × the {estimate} estimate) (s)",
    )


def _limit_floor(default_s: float, call: str, known: str) -> Any:
    """The least derived limit of one ``call`` (s), up to a day: the whole limit until
    ``known`` is known."""
    return Field(
        default_s,
        gt=0,
        le=86400,
        description=f"Least derived {call} limit; the whole limit until a {known} is known (s)",
    )


class TimeoutSettings(Section):
    """How long one synthesize, prove or verify call may run before it is abandoned.

    A limit left at 0 is derived: max(floor, estimate_multiple × the controller's estimate),
    the GPU service time for prove and the synthesis duration for synthesis and verify (the
    same buffers, read on the CPU); the floor alone until an estimate exists.
    """

    synthesis_s: float = _call_limit("synthesis", "synthesis_floor_s", "synthesis", "thread")
    prove_s: float = _call_limit("prove", "prove_floor_s", "GPU service-time", "worker")
    verify_s: float = _call_limit("verification", "verify_floor_s", "synthesis", None)
    estimate_multiple: float = Field(
        10.0,
        ge=1,
        le=1000,
        description="A derived limit is this many times the controller's estimate of the "
        "call's duration, at least its floor (1)",
    )
    synthesis_floor_s: float = _limit_floor(600.0, "synthesis", "synthesis duration")
    prove_floor_s: float = _limit_floor(30.0, "prove", "GPU service time")
    verify_floor_s: float = _limit_floor(600.0, "verification", "synthesis duration")


class RetrySettings(Section):
    """What happens to a partition whose attempt failed (raised, timed out, a bad proof)."""

    max: int = Field(
        3,
        ge=1,
        le=100,
        description="Attempts per partition before its job fails; 1: no retry (attempts)",
    )
    backoff_s: float = Field(
        1.0,
        ge=0,
        le=3600,
        description="Wait before a partition's second attempt, doubling for each later one (s)",
    )
    backoff_max_s: float = Field(
        60.0, ge=0, le=86400, description="Longest wait before an attempt, however many failed (s)"
    )


class HealthSettings(Section):
    """What /readyz reports beside starting and draining: tasks down, and stalls."""

    stall_s: float = Field(
        300.0,
        ge=0,
        le=86400,
        description="Not ready while work waits and nothing has been synthesized, proved or "
        "committed for this long; 0: never (s)",
    )
