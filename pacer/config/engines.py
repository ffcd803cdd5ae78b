"""Engine sessions (``PACER_ENGINE__*``): proving engines pacer paces over the engine
protocol (docs/engine-protocol.md)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from pacer.config.section import Section


class EngineSettings(Section):
    """Engine sessions: how long a disconnected one is kept, how much may wait to be sent to
    one, how many at once, and a Unix socket to serve them on."""

    grace_s: float = Field(
        60.0,
        ge=0,
        le=86400,
        description="How long a disconnected engine's session is kept for it to resume with "
        "its token; then it ends and its estimates are saved (s)",
    )
    send_queue: int = Field(
        256,
        ge=1,
        le=1_000_000,
        description="Messages that may wait to be sent to one engine; an engine that reads "
        "slower is told and disconnected, others unaffected (messages)",
    )
    max_sessions: int = Field(
        1000, ge=1, le=100_000, description="Engine sessions at once, kept ones included (count)"
    )
    socket: Path | None = Field(
        None,
        description="A Unix socket to serve the API on as well, engine sessions included "
        "(ws+unix); unset: TCP only (path)",
    )
