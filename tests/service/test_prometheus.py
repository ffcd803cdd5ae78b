"""A real Prometheus scraping real `pacer serve`s, one under the pi policy, a host of a fleet
(a PostgreSQL journal) pacing an engine, and one under a baseline on its own SQLite journal:
every dashboard query has data, the baseline instance lacks only the PI terms, the fleet's
series and the engines', every legend's labels are on the series, every metric the dashboard
and the alerts use is exported, and promtool accepts the rules and the live exposition."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests.conftest import ensure_debian_package
from tests.dashboard_queries import (
    PI_ONLY_SERIES,
    engine_only,
    fleet_only,
    load,
    metric_names,
    panel_queries,
    panels,
    substitute,
)
from tests.postgres_server import PostgresServer
from tests.servers import READY_S, ROOT, ServerProcess, free_port
from tests.waits import wait_until

pytestmark = pytest.mark.slow

RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
BASELINE = "unpaced"
JOB_TIME = 'pacer_job_duration_seconds_count{outcome="completed"}'


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    ensure_debian_package("promtool", "prometheus")
    path = shutil.which("prometheus")
    if path is None:
        pytest.skip("prometheus missing and Debian's prometheus package cannot be installed here")
    return path


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as response:
            return json.loads(response.read())

    def query(self, expr: str) -> list[dict[str, Any]]:
        body = self.get("/api/v1/query", query=expr)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


@dataclass
class Stack:
    """``pi`` (a host of a fleet) and ``baseline`` (under :data:`BASELINE`, on SQLite)
    scraped by ``prom``."""

    pi: ServerProcess
    baseline: ServerProcess
    prom: Prometheus


def instance(server: ServerProcess) -> str:
    """The ``instance`` label Prometheus gives ``server``'s series."""
    return f"127.0.0.1:{server.port}"


@pytest.fixture(scope="module")
def stack(
    prometheus_binary: str,
    postgres_server: PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("stack")
    env = {"PACER_NTT__LOG_N": "11", "PACER_GPU__WORKERS": "2"}
    fleet = {"PACER_JOURNAL__URL": postgres_server.create_database(), "PACER_JOURNAL__HOST": "pi"}
    servers: dict[str, ServerProcess] = {}
    for policy in ("pi", BASELINE):
        (tmp / policy).mkdir()  # a journal each
        journal = fleet if policy == "pi" else {}
        servers[policy] = ServerProcess(
            tmp / policy, **env, **journal, PACER_CONTROLLER__POLICY=policy
        )
    try:  # serving first: the scrape targets name the ports they were given
        for server in servers.values():
            server.launch()
        for server in servers.values():
            server.client.wait_ready(READY_S)
    except BaseException:
        for server in servers.values():
            server.stop()
        raise
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {
                "job_name": "pacer",
                "static_configs": [{"targets": [instance(s) for s in servers.values()]}],
            }
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [prometheus_binary, f"--config.file={tmp / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    prom = Prometheus(f"http://127.0.0.1:{port}")
    # An engine paced by the pi instance, for the Engines row: it runs until the stack stops.
    engine = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "engine.py"), "--engine", "stack-engine",
         "--url", f"ws://127.0.0.1:{servers['pi'].port}/v1/engine", "--partitions", "1000000",
         "--gpu-s", "0.05", "--synthesis-s", "0.2"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(lambda: _ready(prom), "Prometheus to start")
        # a few seconds of work on each
        jobs = [(s, s.client.submit(80)) for s in servers.values() for _ in range(4)]
        wait_until(lambda: len(prom.query('up{job="pacer"} == 1')) == len(servers),
                   "the first scrapes")  # fmt: skip
        wait_until(lambda: all(s.client.job(j)["state"] == "completed" for s, j in jobs),
                   "the jobs to complete", timeout_s=120)  # fmt: skip
        # A rate takes two scrapes of its series. The last series to appear, the jobs' time,
        # comes with a job's end: once it has two, so has every series before it.
        wait_until(lambda: prom.query(f"count_over_time({JOB_TIME}[1m]) >= 2"),
                   "two scrapes of each instance's job times",
                   done=lambda series: len(series) == len(servers))  # fmt: skip
        yield Stack(servers["pi"], servers[BASELINE], prom)
    finally:
        engine.kill()
        engine.wait(10)
        proc.terminate()
        proc.wait(10)
        log.close()
        for server in servers.values():
            server.stop()


def _ready(prom: Prometheus) -> bool:
    try:
        with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def exported_names(exposition: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^(pacer_\w+)[{ ]", exposition, flags=re.M)}


def alert_exprs() -> list[tuple[str, str]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [(rule["alert"], rule["expr"]) for group in groups for rule in group["rules"]]


QUERIES = panel_queries()


@pytest.mark.parametrize(("title", "expr"), QUERIES, ids=[f"{t}: {e}" for t, e in QUERIES])
def test_every_dashboard_query_has_data(stack: Stack, title: str, expr: str) -> None:
    assert stack.prom.query(expr), f"panel {title!r}: no data for {expr}"


def test_a_baseline_instance_lacks_only_the_pi_terms_and_the_fleets_series(stack: Stack) -> None:
    """With the instance variable on the baseline (on SQLite, no engine session), the queries
    of PI terms, of the fleet and of engine sessions have no data (their panels' descriptions
    say so) and every other query has."""
    queries = panel_queries(instance=instance(stack.baseline))
    has_data = {(title, expr): bool(stack.prom.query(expr)) for title, expr in queries}
    expected = {
        (title, expr): not metric_names(expr) & PI_ONLY_SERIES
        and not fleet_only(metric_names(expr))
        and not engine_only(metric_names(expr))
        for title, expr in queries
    }
    assert has_data == expected


def test_policy_panel_shows_each_instance_policy(stack: Stack) -> None:
    [(_, expr)] = [(t, e) for t, e in QUERIES if t == "Dispatch policy"]
    shown = {(s["metric"]["instance"], s["metric"]["policy"]) for s in stack.prom.query(expr)}
    assert shown == {(instance(stack.pi), "pi"), (instance(stack.baseline), BASELINE)}


def test_every_legend_names_labels_of_its_series(stack: Stack) -> None:
    """A ``{{label}}`` that a query's series lack renders empty: for the policy panel, which
    shows its legend only, that would be a blank tile."""
    missing = []
    for panel in panels(load()):
        for target in panel["targets"]:
            wanted = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target["legendFormat"]))
            for series in stack.prom.query(substitute(target["expr"])):
                if lacking := wanted - series["metric"].keys():
                    missing.append((panel["title"], target["refId"], sorted(lacking)))
    assert missing == []


def test_every_metric_the_dashboard_and_alerts_use_is_exported(stack: Stack) -> None:
    exposition = stack.pi.metrics_text()
    exported = exported_names(exposition)
    used = {name for _, expr in QUERIES for name in metric_names(expr)}
    used |= {name for _, expr in alert_exprs() for name in metric_names(expr)}
    assert used, "no metric names found: the parser is broken"
    assert sorted(used - exported) == []


def test_prometheus_loaded_the_alert_rules(stack: Stack) -> None:
    groups = stack.prom.get("/api/v1/rules")["data"]["groups"]
    loaded = {rule["name"] for group in groups for rule in group["rules"]}
    assert loaded == {name for name, _ in alert_exprs()}
    assert all(rule["health"] == "ok" for g in groups for rule in g["rules"]), groups


def test_promtool_accepts_rules_and_live_exposition(stack: Stack, promtool: str) -> None:
    for args in (["check", "rules", str(RULES)],
                 ["test", "rules", str(RULES.with_name("rules.test.yml"))]):  # fmt: skip
        proc = subprocess.run([promtool, *args], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    for server in (stack.pi, stack.baseline):
        exposition = server.metrics_text()
        checked = subprocess.run(
            [promtool, "check", "metrics"], input=exposition, capture_output=True, text=True
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
