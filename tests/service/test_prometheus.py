"""A real Prometheus scraping a real `pacer serve`: every dashboard query has data, every metric
the dashboard and the alerts use is exported, and promtool accepts the rules and the live
exposition."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.conftest import ensure_debian_package
from tests.dashboard_queries import metric_names, panel_queries
from tests.service.conftest import ROOT, ServerProcess, free_port, wait_for

RULES = ROOT / "deploy" / "prometheus" / "rules.yml"


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


@pytest.fixture(scope="module")
def stack(
    prometheus_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, Prometheus]]:
    tmp = tmp_path_factory.mktemp("stack")
    server = ServerProcess(tmp, PACER_NTT__LOG_N="11", PACER_GPU__WORKERS="2").start()
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {"job_name": "pacer", "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}]}
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
    try:
        wait_for(lambda: _ready(prom), what="Prometheus to start")
        jobs = [server.client.submit(80) for _ in range(4)]  # a few seconds of work
        wait_for(lambda: bool(prom.query('up{job="pacer"} == 1')), what="the first scrape")
        time.sleep(6)  # several scrapes while the work runs: rates and quantiles have data
        wait_for(lambda: all(server.client.job(j)["state"] == "completed" for j in jobs),
                 timeout=120, what="the jobs")  # fmt: skip
        time.sleep(2)
        yield server, prom
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
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
def test_every_dashboard_query_has_data(
    stack: tuple[ServerProcess, Prometheus], title: str, expr: str
) -> None:
    _, prom = stack
    assert prom.query(expr), f"panel {title!r}: no data for {expr}"


def test_every_metric_the_dashboard_and_alerts_use_is_exported(
    stack: tuple[ServerProcess, Prometheus],
) -> None:
    server, _ = stack
    exposition = server.metrics_text()
    exported = exported_names(exposition)
    used = {name for _, expr in QUERIES for name in metric_names(expr)}
    used |= {name for _, expr in alert_exprs() for name in metric_names(expr)}
    assert used, "no metric names found: the parser is broken"
    assert sorted(used - exported) == []


def test_prometheus_loaded_the_alert_rules(stack: tuple[ServerProcess, Prometheus]) -> None:
    _, prom = stack
    groups = prom.get("/api/v1/rules")["data"]["groups"]
    loaded = {rule["name"] for group in groups for rule in group["rules"]}
    assert loaded == {name for name, _ in alert_exprs()}
    assert all(rule["health"] == "ok" for g in groups for rule in g["rules"]), groups


def test_promtool_accepts_rules_and_live_exposition(
    stack: tuple[ServerProcess, Prometheus], promtool: str
) -> None:
    server, _ = stack
    for args in (["check", "rules", str(RULES)],
                 ["test", "rules", str(RULES.with_name("rules.test.yml"))]):  # fmt: skip
        proc = subprocess.run([promtool, *args], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=server.metrics_text(), capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
