"""The PromQL of the Grafana dashboard, ready to evaluate against a real Prometheus.

Grafana fills in the dashboard's variables before it sends a query; :func:`panel_queries` does
the same with fixed values, so a test can run every panel's expression through Prometheus and
compare the metric names it uses (:func:`metric_names`) with a live ``/metrics`` exposition.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[1] / "dashboards" / "pacer.json"

SUBSTITUTIONS: dict[str, str] = {
    "gpu": ".*",
    "instance": ".*",
    "__rate_interval": "1m",
    "__interval": "30s",
    "__range": "5m",
}
"""What each dashboard variable becomes: "All" for the selections (their ``allValue``), and
windows that hold several samples at a scrape interval of up to 15 s."""

PI_TERMS = (
    "error", "p_term", "i_term", "ff_term", "setpoint", "projected_ready", "synthesis_cap",
    "synthesis_supply", "synthesis_queue", "synthesis_handoff_seconds", "lead_seconds",
    "live_floor_seconds", "slowdown", "held_workers", "synthesis_hung",
)  # fmt: skip
PI_ONLY_SERIES = frozenset(f"pacer_controller_{term}" for term in PI_TERMS)
"""The series exported under the ``pi`` dispatch policy only (docs/metrics.md): under a baseline
policy they are absent, so a query of them has no data for that instance."""

FLEET_PREFIX = "pacer_fleet_"
"""The series a host of a fleet (a PostgreSQL journal) exports, and only such a host: a query of
them has no data for an instance on an SQLite journal."""


ENGINE_PREFIX = "pacer_engine_"
ENGINE_ALWAYS = frozenset({"pacer_engine_sessions"})
"""The series of engine sessions: each exists only while an engine has a session with that
instance, but ``pacer_engine_sessions``, which every instance exports."""


def engine_only(names: set[str]) -> bool:
    """Whether ``names`` (a query's series) include one that only an instance with an engine
    session exports."""
    return any(n.startswith(ENGINE_PREFIX) and n not in ENGINE_ALWAYS for n in names)


def fleet_only(names: set[str]) -> bool:
    """Whether ``names`` (a query's series) include one only a fleet's host exports."""
    return any(name.startswith(FLEET_PREFIX) for name in names)


# $name, ${name} and ${name:format}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
# Strings first (a regex may hold braces), then label matchers and grouping and matching
# clauses: what is left names metrics, not labels.
_STRING = re.compile(r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`""")
_LABELS = re.compile(r"\{[^}]*\}|\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_METRIC = re.compile(r"(?<![\w:])pacer_\w+")


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel of ``dashboard`` that is not a row, including those inside collapsed rows."""
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def load(path: Path | None = None) -> dict[str, Any]:
    """The dashboard JSON model at ``path`` (default: ``dashboards/pacer.json``)."""
    model = json.loads((path or DASHBOARD).read_text(encoding="utf-8"))
    if not isinstance(model, dict):
        raise ValueError(f"{path or DASHBOARD}: a dashboard is a JSON object, got {type(model)}")
    return model


def substitute(expr: str, **values: str) -> str:
    """``expr`` with the dashboard variables replaced by :data:`SUBSTITUTIONS`, or by ``values``
    where they name the variable (one instance rather than all, say).

    >>> substitute('rate(pacer_jobs_total{gpu=~"$gpu"}[$__rate_interval])')
    'rate(pacer_jobs_total{gpu=~".*"}[1m])'
    >>> substitute('pacer_ready_partitions{instance=~"$instance"}', instance="host:9100")
    'pacer_ready_partitions{instance=~"host:9100"}'
    """
    table = {**SUBSTITUTIONS, **values}

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in table:
            raise ValueError(f"dashboard variable ${name} has no value for evaluation: {expr}")
        return table[name]

    return _VARIABLE.sub(value, expr)


def panel_queries(path: Path | None = None, **values: str) -> list[tuple[str, str]]:
    """(panel title, PromQL expression) for every target of every panel, variables substituted
    as :func:`substitute` does with ``values``.

    In dashboard order; a panel with several targets gives several pairs with the same title.
    Raises ValueError for a variable that :data:`SUBSTITUTIONS` does not know.
    """
    return [
        (str(panel.get("title", "")), substitute(str(target.get("expr", "")), **values))
        for panel in panels(load(path))
        for target in panel.get("targets", [])
    ]


def metric_names(expr: str) -> set[str]:
    """The ``pacer_*`` series names that ``expr`` selects, exactly as written.

    These are sample names of the exposition, not metric family names: a histogram appears as
    ``pacer_x_seconds_bucket`` (or ``_sum``, ``_count``), a counter as ``pacer_x_total``, a
    gauge and a state set by their own name. Compare them with the names of the exposition's
    sample lines (the text before ``{`` or the first space), not with its ``# TYPE`` lines.
    Label names (in ``{...}``, ``by (...)``, ``without (...)``, ``on (...)``) are not returned.

    >>> sorted(metric_names('sum by (le) (rate(pacer_synthesis_seconds_bucket{gpu="0"}[1m]))'))
    ['pacer_synthesis_seconds_bucket']
    """
    return set(_METRIC.findall(_LABELS.sub(" ", _STRING.sub(" ", expr))))
