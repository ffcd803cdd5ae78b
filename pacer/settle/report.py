"""The one line `pacer settle` prints at the end of a run: settled or not, and on what."""

from __future__ import annotations

from pacer.settle.detector import Trend, gib
from pacer.settle.loop import Result, SettleOptions
from pacer.settle.scope import Scope

__all__ = ["summary"]


def summary(
    result: Result, options: SettleOptions, replay_ended: bool = False, scope: Scope | None = None
) -> str:
    """The one line printed at the end of a run; ``scope``: the memory judged, which it names
    (None: a replay's recorded used memory)."""
    base = options.baseline_bytes
    if result.settled:
        last = result.samples[-1]
        used = last.judged_bytes
        sampled = f"used {gib(last.used_bytes)}" if scope is None else scope.used(last.used_bytes)
        head = f"settled after {result.settled_at_s:.1f} s: {sampled}"
        if last.kept_bytes:
            head += f", {gib(last.kept_bytes)} of it kept for the next pacer"
        if result.reason == "baseline":
            assert base is not None
            if used < base:
                return f"{head}, below the {gib(base)} baseline"
            tol = gib(options.tolerance_bytes)
            return f"{head}, within {tol} of the {gib(base)} baseline"
        assert result.trend is not None
        line = f"{head}, stable: changed {gib(result.trend.spread_bytes)} over the last "
        line += f"{result.trend.span_s:.3g} s"
        if base is not None and used > base:
            line += f" ({gib(used - base)} above the {gib(base)} baseline)"
        return line
    ended = result.samples[-1].t_s if result.samples else 0.0
    when = f"{ended:g} s (end of the replay)" if replay_ended else f"{options.timeout_s:g} s"
    problems = []
    if not result.host_settled:
        what = "used memory" if scope is None else scope.what
        problems.append(_unsettled(what, result.trend, options, base))
    if not result.gpu_settled:
        gpu_base = options.gpu_baseline_bytes
        problems.append(_unsettled("GPU memory", result.gpu_trend, options, gpu_base))
    problems += [f"{p} still present" for p in result.blockers]
    if result.held is not None and result.held.holders:
        pids = ", ".join(str(holder.pid) for holder in result.held.holders)
        problems.append(
            f"{result.held.words()} (pid {pids}), given back only when they end; "
            "--kill-orphans kills those that are pacer's synthesis processes"
        )
    return f"not settled after {when}: {'; '.join(problems)}"


def _unsettled(what: str, trend: Trend | None, options: SettleOptions, base: int | None) -> str:
    if trend is None:
        return f"{what} not sampled"
    tol = options.tolerance_bytes
    if not trend.covered:
        text = f"{what} {trend.words()}, short of the {options.window_s:g} s window"
    elif abs(trend.change_bytes) >= tol:
        text = f"{what} still {trend.words()}"
    else:
        text = f"{what} varying by {gib(trend.spread_bytes)} over the last {trend.span_s:.3g} s"
    return text if base is None else f"{text}, above the {gib(base)} baseline + {gib(tol)}"


# --- command line ---------------------------------------------------------------------------
