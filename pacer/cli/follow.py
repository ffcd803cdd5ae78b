"""Following jobs from the command line: waiting for the service to answer, a progress line
while jobs run, and the throughput both it and `pacer run`'s summary show."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pacer.cli.args import Progress
from pacer.client import TERMINAL, ApiError, BlockingClient, UnreachableError

POLL_S = 0.5


def wait_ready(
    client: BlockingClient,
    timeout_s: float,
    progress: Progress,
    path: str = "/readyz",
    check: Callable[[], None] | None = None,
    what: str = "",
    quiet_s: float = 0.0,
    unreachable_s: float | None = None,
) -> float:
    """Wait for the service, saying so once it has not been up for ``quiet_s`` (a service
    just started is not up at once, and that is no news); the seconds it took. ``check()``
    runs between attempts and may raise to stop waiting; ``what`` names the service
    (default: pacer at its address). With ``unreachable_s``, a service not reached for that
    long raises `UnreachableError` at once, and the moments before are not shown."""
    what = what or f"pacer at {client.base_url}"
    waited = False

    def waiting(elapsed_s: float, error: ApiError) -> None:
        nonlocal waited
        if check is not None:
            check()
        if elapsed_s < quiet_s:
            return
        if unreachable_s is not None and isinstance(error, UnreachableError):
            return
        waited = True
        progress.show(f"waiting for {what} ({error.reason}), {elapsed_s:.0f} s of "
                      f"{timeout_s:g}")  # fmt: skip

    took = client.wait_ready(timeout_s, path, waiting, unreachable_s)
    if waited:
        progress.show(f"{what} is up after {took:.1f} s", final=True)
    return took


def span_s(jobs: list[dict[str, Any]]) -> float | None:
    """Seconds from the first job's submission to the last one's end, on the service's clock
    (finer than polling for them); None from a service that does not say."""
    try:
        return float(max(j["updated_at"] for j in jobs) - min(j["created_at"] for j in jobs))
    except (KeyError, TypeError, ValueError):
        return None


def rate_text(done: int, seconds: float) -> str:
    """The throughput of a run, as the progress line and the summary both show it: partitions
    done ÷ seconds from the first submit (to the last job's end, once all have ended)."""
    return f"{done / seconds:.1f} partitions/s" if seconds > 0 else "-"


def follow(
    client: BlockingClient,
    ids: list[str],
    total: int,
    progress: Progress,
    check: Callable[[], None] | None = None,
    started: float | None = None,
) -> list[dict[str, Any]]:
    """Poll jobs ``ids`` (``total`` partitions) until every one has ended, showing progress;
    their last states. ``check()`` runs after each poll and may raise to stop following;
    ``started``: when the first was submitted (`time.monotonic`; default: now)."""
    started = time.monotonic() if started is None else started

    def show(jobs: list[dict[str, Any]], _: float) -> None:
        if check is not None:
            check()
        done = sum(j["partitions_done"] for j in jobs)
        ended = sum(j["state"] in TERMINAL for j in jobs)
        finished = ended == len(jobs)
        elapsed = time.monotonic() - started
        if finished:  # the summary's time: the service's, from the first submit to the end
            elapsed = span_s(jobs) or elapsed
        rate = f", {rate_text(done, elapsed)}" if done and elapsed > 0 else ""
        progress.show(f"{done}/{total} partitions, {ended}/{len(jobs)} jobs ended, "
                      f"{elapsed:.0f} s{rate}", final=finished)  # fmt: skip

    jobs = client.wait(ids, show, POLL_S)
    progress.end()
    return jobs
