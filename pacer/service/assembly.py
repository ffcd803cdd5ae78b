"""What a service is built from, decided without I/O: the bind check, the controller's saved
estimates read back, and the pipeline's observer."""

from __future__ import annotations

from pacer.config import Settings
from pacer.control.estimates import Estimates
from pacer.pipeline import Observer, Outcome
from pacer.pipeline.attempts import Call
from pacer.plan import ConfigurationError
from pacer.runtime.supervision import ProgressWatchdog


def check_bind(settings: Settings) -> None:
    """Refuse a non-loopback address without a token, unless explicitly allowed
    (`pacer.config.ApiSettings.bind_problem`)."""
    problem = settings.api.bind_problem()
    if problem is not None:
        raise ConfigurationError(problem)


def saved_estimates(saved: dict[str, float | None] | None) -> Estimates | None:
    """The controller's estimates as the journal saved them (a restart starts warm)."""
    if not saved or saved.get("gpu_service_s") is None or saved.get("synthesis_s") is None:
        return None
    return Estimates(
        saved["gpu_service_s"], saved["synthesis_s"], saved.get("synthesis_sd_s") or 0.0
    )


class Progress:
    """The pipeline's observer: the metrics, with each synthesis and proof reported to the
    watchdog as progress."""

    def __init__(self, metrics: Observer, watchdog: ProgressWatchdog) -> None:
        self._metrics = metrics
        self._watchdog = watchdog

    def synthesized(self, seconds: float, wait_s: float) -> None:
        self._watchdog.progress()
        self._metrics.synthesized(seconds, wait_s)

    def proved(self, gpu: int, gpu_s: float, phases_s: dict[str, float]) -> None:
        self._watchdog.progress()
        self._metrics.proved(gpu, gpu_s, phases_s)

    def idle_gap(self, gpu: int, seconds: float) -> None:
        self._metrics.idle_gap(gpu, seconds)

    def finished(self, outcome: Outcome) -> None:
        self._metrics.finished(outcome)

    def hung_call(self, call: Call) -> None:
        self._metrics.hung_call(call)
