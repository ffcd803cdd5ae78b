"""Static checks of the Grafana dashboard and its provisioning: structure, layout, datasource,
and that every query uses only the series pacer exports (the metrics table of docs/metrics.md).
tests/service/test_prometheus.py evaluates the same queries against a real Prometheus."""

from __future__ import annotations

import doctest
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from pacer.control.policy import Mode
from tests import dashboard_queries
from tests.dashboard_queries import (
    PI_ONLY_SERIES,
    fleet_only,
    load,
    metric_names,
    panel_queries,
    panels,
    substitute,
)

ROOT = Path(__file__).resolve().parents[1]
PROVISIONING = ROOT / "dashboards" / "provisioning"
DASHBOARDS_PATH = "/var/lib/grafana/dashboards"
ROWS = ["Overview", "Controller", "Pipeline", "Pinned pool", "GPUs", "Jobs", "Health", "Process",
        "Engines", "Fleet"]  # fmt: skip
PANEL_TYPES = {"timeseries", "stat", "state-timeline", "heatmap"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH = 24
QUERIES = panel_queries()


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return load()


def variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {var["name"]: var for var in dashboard["templating"]["list"]}


def query_text(variable: dict[str, Any]) -> str:
    query = variable["query"]
    return str(query["query"] if isinstance(query, dict) else query)


def exported_series() -> set[str]:
    """Series names of the metrics table (docs/metrics.md, "The series"): a histogram as its
    _bucket, _sum and _count series, every other type (counters already end in _total) by its
    own name."""
    page = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    section = page.split("\n## The series\n", 1)[1].split("\n#", 1)[0]
    names: set[str] = set()
    for name, kind in re.findall(r"^\| `(pacer_\w+)` \| ([^|]+) \|", section, flags=re.M):
        if kind.strip() == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            names.add(name)
    return names


def provisioned(kind: str, name: str) -> dict[str, Any]:
    config = yaml.safe_load((PROVISIONING / kind / name).read_text(encoding="utf-8"))
    assert isinstance(config, dict)
    return config


def test_dashboard_settings(dashboard: dict[str, Any]) -> None:
    assert dashboard["schemaVersion"] == 39
    assert dashboard["uid"] == "pacer"
    assert dashboard["title"] == "pacer"
    assert dashboard["refresh"] == "10s"
    assert dashboard["time"] == {"from": "now-1h", "to": "now"}
    assert dashboard["id"] is None  # provisioning assigns the id


def test_datasource_variable_defaults_to_the_provisioned_prometheus(
    dashboard: dict[str, Any],
) -> None:
    variable = variables(dashboard)["datasource"]
    assert variable["type"] == "datasource"
    assert variable["query"] == "prometheus"
    [source] = provisioned("datasources", "prometheus.yaml")["datasources"]
    assert variable["current"]["value"] == source["uid"]


def test_gpu_variable_selects_every_gpu_by_default(dashboard: dict[str, Any]) -> None:
    variable = variables(dashboard)["gpu"]
    assert variable["type"] == "query"
    assert re.fullmatch(
        r"label_values\(pacer_gpu_busy_ratio(\{[^}]*\})?, gpu\)", query_text(variable)
    )
    assert variable["multi"] is True
    assert variable["includeAll"] is True
    assert variable["allValue"] == ".*"
    assert variable["current"]["value"] == ["$__all"]


def test_every_variable_has_a_value_for_evaluation(dashboard: dict[str, Any]) -> None:
    for name, variable in variables(dashboard).items():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, name
            assert variable.get("allValue", ".*") == dashboard_queries.SUBSTITUTIONS[name], name
            substitute(query_text(variable))


def test_every_panel_and_target_uses_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    for panel in panels(dashboard):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, (panel["title"], target["refId"])


def test_every_panel_has_a_title_a_description_and_queries(dashboard: dict[str, Any]) -> None:
    for panel in panels(dashboard):
        title = panel.get("title", "")
        assert title.strip(), panel["id"]
        assert panel.get("description", "").strip(), title
        assert panel["type"] in PANEL_TYPES, title
        targets = panel["targets"]
        assert targets, title
        assert len({t["refId"] for t in targets}) == len(targets), f"{title}: refIds repeat"
        for target in targets:
            assert target["expr"].strip(), (title, target["refId"])
            assert isinstance(target["legendFormat"], str), (title, target["refId"])


def test_every_panel_declares_its_unit(dashboard: dict[str, Any]) -> None:
    for panel in panels(dashboard):
        if panel["type"] == "heatmap":
            assert panel["options"]["yAxis"]["unit"], panel["title"]
        else:
            assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        if panel["type"] != "stat":
            assert "legend" in panel["options"], panel["title"]


def test_panel_ids_are_unique(dashboard: dict[str, Any]) -> None:
    rows = [p for p in dashboard["panels"] if p["type"] == "row"]
    ids = [p["id"] for p in [*rows, *panels(dashboard)]]
    assert all(isinstance(i, int) and i > 0 for i in ids), ids
    assert sorted({i for i in ids if ids.count(i) > 1}) == []


def test_panels_fit_the_grid_without_overlapping(dashboard: dict[str, Any]) -> None:
    taken: dict[tuple[int, int], str] = {}
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0, panel["title"]
        assert pos["y"] >= 0, panel["title"]
        assert pos["w"] > 0, panel["title"]
        assert pos["h"] > 0, panel["title"]
        assert pos["x"] + pos["w"] <= GRID_WIDTH, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = panel["title"]


def test_rows_come_in_order_each_followed_by_its_panels(dashboard: dict[str, Any]) -> None:
    top = dashboard["panels"]
    rows = [p for p in top if p["type"] == "row"]
    assert [r["title"] for r in rows] == ROWS
    assert top[0]["type"] == "row"
    assert all(r["gridPos"]["w"] == GRID_WIDTH and r["gridPos"]["x"] == 0 for r in rows)
    starts = [r["gridPos"]["y"] for r in rows]
    assert starts == sorted(starts)
    for i, panel in enumerate(top):
        if panel["type"] == "row":
            assert not panel["collapsed"], panel["title"]
            assert i + 1 < len(top), f"row {panel['title']} has no panels"
            assert top[i + 1]["type"] != "row", f"row {panel['title']} has no panels"
            row_y = panel["gridPos"]["y"]
        else:
            # below its own row, above the next one
            assert panel["gridPos"]["y"] > row_y, panel["title"]
            later = [y for y in starts if y > row_y]
            bottom = panel["gridPos"]["y"] + panel["gridPos"]["h"]
            assert not later or bottom <= later[0], panel["title"]


def test_controller_mode_panel_names_every_mode(dashboard: dict[str, Any]) -> None:
    [panel] = [p for p in panels(dashboard) if p["title"] == "Controller mode"]
    [mapping] = panel["fieldConfig"]["defaults"]["mappings"]
    assert {m["text"] for m in mapping["options"].values()} == {m.value for m in Mode}
    for code, shown in mapping["options"].items():
        assert f', mode="{shown["text"]}"}} * {code}' in panel["targets"][0]["expr"]


def test_policy_panel_names_the_policy_of_each_instance(dashboard: dict[str, Any]) -> None:
    [panel] = [p for p in panels(dashboard) if p["title"] == "Dispatch policy"]
    rows = {p["title"]: p["gridPos"]["y"] for p in dashboard["panels"] if p["type"] == "row"}
    controller_y, pipeline_y = rows["Controller"], rows["Pipeline"]
    assert controller_y < panel["gridPos"]["y"] < pipeline_y, "not in the Controller row"
    assert panel["type"] == "stat"
    assert panel["options"]["textMode"] == "name"  # the legend is what it shows, not the 1
    [target] = panel["targets"]
    assert metric_names(target["expr"]) == {"pacer_controller_policy_info"}
    assert 'instance=~"$instance"' in target["expr"]
    assert "{{policy}}" in target["legendFormat"]
    assert "{{instance}}" in target["legendFormat"]
    assert target["instant"] is True


def test_pi_only_series_are_the_documented_pi_terms() -> None:
    page = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    [terms] = re.findall(r"the PI terms \(([^)]*)\) are absent", page)
    assert {f"pacer_controller_{t}" for t in re.findall(r"`(\w+)`", terms)} == PI_ONLY_SERIES
    assert exported_series() >= PI_ONLY_SERIES


def test_panels_of_pi_terms_say_they_are_empty_under_a_baseline(
    dashboard: dict[str, Any],
) -> None:
    pi_panels = [
        panel
        for panel in panels(dashboard)
        if any(metric_names(t["expr"]) & PI_ONLY_SERIES for t in panel["targets"])
    ]
    assert pi_panels
    for panel in pi_panels:
        assert "empty when the policy is not pi" in panel["description"].lower(), panel["title"]


def test_panels_of_fleet_series_say_hosts_without_a_fleet_show_nothing(
    dashboard: dict[str, Any],
) -> None:
    fleet_panels = [
        panel
        for panel in panels(dashboard)
        if any(fleet_only(metric_names(t["expr"])) for t in panel["targets"])
    ]
    top = dashboard["panels"]
    row = next(i for i, p in enumerate(top) if p["type"] == "row" and p["title"] == "Fleet")
    assert [p["title"] for p in fleet_panels] == [p["title"] for p in top[row + 1 :]]
    described = " ".join(panel["description"] for panel in fleet_panels)
    assert "SQLite journal are not in a fleet and show nothing" in described


@pytest.mark.parametrize(("title", "expr"), QUERIES, ids=[f"{t}: {e}" for t, e in QUERIES])
def test_query_uses_only_exported_series(title: str, expr: str) -> None:
    used = metric_names(expr)
    assert used, f"{title}: no pacer_ series in {expr}"
    assert sorted(used - exported_series()) == [], title


def test_readme_table_yields_the_series() -> None:
    names = exported_series()
    assert "pacer_controller_mode" in names
    assert "pacer_jobs_total" in names
    assert {"pacer_synthesis_seconds_bucket", "pacer_synthesis_seconds_count"} <= names
    assert "pacer_synthesis_seconds" not in names


@pytest.mark.parametrize(("title", "expr"), QUERIES, ids=[f"{t}: {e}" for t, e in QUERIES])
def test_rates_are_over_counters_and_quantiles_over_buckets_by_le(title: str, expr: str) -> None:
    for function, series in re.findall(r"\b(rate|increase)\(\s*(\w+)", expr):
        assert series.endswith(("_total", "_bucket")), f"{title}: {function}({series})"
    for aggregation in re.findall(r"histogram_quantile\([^,]+,\s*(\w+ by \([^)]*\))", expr):
        assert re.search(r"\ble\b", aggregation), f"{title}: {aggregation} drops le"
    assert expr.count("histogram_quantile(") <= expr.count("_bucket"), title


def test_queries_parse(promtool: str, tmp_path: Path) -> None:
    rules = [{"record": f"dashboard:query{i}", "expr": expr} for i, (_, expr) in enumerate(QUERIES)]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        pytest.param("pacer_ready_partitions", {"pacer_ready_partitions"}, id="plain"),
        pytest.param(
            'sum without (pacer_mode) (pacer_mode{pacer_mode="x"})',
            {"pacer_mode"},
            id="label-named-like-the-metric",
        ),
        pytest.param(
            'sum by (pacer_label) (pacer_jobs_total{x=~"pacer_in_a_string"})',
            {"pacer_jobs_total"},
            id="grouping-and-string",
        ),
        pytest.param(
            "pacer_a / on (pacer_b) group_left (pacer_c) pacer_d",
            {"pacer_a", "pacer_d"},
            id="vector-matching",
        ),
        pytest.param(
            'rate(pacer_gap_seconds_bucket{le=~"0.{2}1"}[1m])',
            {"pacer_gap_seconds_bucket"},
            id="braces-in-a-regex",
        ),
        pytest.param("up + node_load1", set(), id="other-metrics"),
    ],
)
def test_metric_names_skips_labels_and_strings(expr: str, expected: set[str]) -> None:
    assert metric_names(expr) == expected


def test_every_variable_is_substituted() -> None:
    for title, expr in QUERIES:
        assert "$" not in expr, title
    assert substitute("x[${__rate_interval}] ${gpu:regex}") == "x[1m] .*"


def test_substitute_rejects_an_unknown_variable() -> None:
    with pytest.raises(ValueError, match=r"\$host has no value"):
        substitute('up{instance="$host"}')


def test_helper_docstring_examples() -> None:
    result = doctest.testmod(dashboard_queries)
    assert result.attempted > 0
    assert result.failed == 0


def test_datasource_provisioning() -> None:
    config = provisioned("datasources", "prometheus.yaml")
    assert config["apiVersion"] == 1
    [source] = config["datasources"]
    assert source["name"] == "Prometheus"
    assert source["type"] == "prometheus"
    assert source["uid"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert source["isDefault"] is True


def test_dashboard_provisioning_loads_the_dashboard_directory() -> None:
    config = provisioned("dashboards", "pacer.yaml")
    assert config["apiVersion"] == 1
    [provider] = config["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == DASHBOARDS_PATH


def row_panels(dashboard: dict[str, Any], title: str) -> list[dict[str, Any]]:
    """The panels under the row ``title``, up to the next row."""
    top: list[dict[str, Any]] = dashboard["panels"]
    start = next(i for i, p in enumerate(top) if p["type"] == "row" and p["title"] == title)
    end = next((i for i in range(start + 1, len(top)) if top[i]["type"] == "row"), len(top))
    return top[start + 1 : end]


def test_the_overview_row_shows_the_few_numbers_asked_first(dashboard: dict[str, Any]) -> None:
    overview = row_panels(dashboard, "Overview")
    assert {p["type"] for p in overview} == {"stat"}
    used = set().union(*(metric_names(t["expr"]) for p in overview for t in p["targets"]))
    assert {"pacer_gpu_busy_ratio", "pacer_partitions_total", "pacer_memory_inflight_bytes",
            "pacer_backlog_partitions", "pacer_ready"} <= used  # fmt: skip


def test_the_process_row_shows_its_memory_and_cpu(dashboard: dict[str, Any]) -> None:
    exprs = " ".join(t["expr"] for p in row_panels(dashboard, "Process") for t in p["targets"])
    assert "process_resident_memory_bytes{" in exprs
    assert "rate(process_cpu_seconds_total{" in exprs
    assert exprs.count("and on (instance) pacer_build_info") >= 3  # pacer's processes only
