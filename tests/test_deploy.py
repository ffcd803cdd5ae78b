"""The deployment files under deploy/: they parse, agree with one another and with the service
(metric names, settings, the drain budget), and pass the tools that check them (promtool,
systemd-analyze) where those are installed."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import tomllib
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pacer.config import ShutdownSettings, load_settings, variables

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
PROMETHEUS = DEPLOY / "prometheus"
K8S = DEPLOY / "k8s"
UNIT = DEPLOY / "systemd" / "pacer.service"
ENV_FILE = DEPLOY / "systemd" / "pacer.env"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
COMPOSE = DEPLOY / "compose.yaml"

DEFAULTS = ShutdownSettings()
YAML_FILES = sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml"))
PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset"}


def longest_stop_s(settings: dict[str, str]) -> float:
    """The longest a stop may take under ``settings`` (`ShutdownSettings.longest_stop_s`), or
    under the defaults where they would take longer."""
    configured = ShutdownSettings(
        drain_s=float(settings.get("PACER_SHUTDOWN__DRAIN_S", DEFAULTS.drain_s)),
        journal_s=float(settings.get("PACER_SHUTDOWN__JOURNAL_S", DEFAULTS.journal_s)),
    )
    return max(configured.longest_stop_s, DEFAULTS.longest_stop_s)


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def rules() -> list[dict[str, Any]]:
    return [rule for group in load(PROMETHEUS / "rules.yml")["groups"] for rule in group["rules"]]


def k8s_object(kind: str) -> dict[str, Any]:
    """The one object of ``kind`` among the manifests the kustomization lists."""
    found: list[dict[str, Any]] = [
        doc
        for name in load(K8S / "kustomization.yaml")["resources"]
        for doc in yaml.safe_load_all((K8S / name).read_text())
        if doc["kind"] == kind
    ]
    assert len(found) == 1, f"{len(found)} objects of kind {kind}"
    return found[0]


def pacer_container() -> dict[str, Any]:
    containers: list[dict[str, Any]] = k8s_object("DaemonSet")["spec"]["template"]["spec"][
        "containers"
    ]
    return next(c for c in containers if c["name"] == "pacer")


def exported_metric_names() -> set[str]:
    """The series names the service exports, from the metrics table of docs/metrics.md (first
    column); a histogram adds its _bucket, _sum and _count series."""
    page = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    section = page.split("\n## The series\n", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for name, kind in re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", section, re.MULTILINE):
        names.add(name)
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    assert len(names) > 20, "the metrics table of docs/metrics.md was not found"
    return names


def promql_metric_names(expr: str) -> set[str]:
    """Metric names an expression selects. Enough PromQL for our rules: strings, label
    matchers, ranges and label lists are dropped, then a name that is not a function call or
    a keyword is a metric."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = re.findall(r"\b[A-Za-z_:][\w:]*\b(?!\s*\()", expr)
    return set(names) - PROMQL_KEYWORDS


def unit_entries(text: str) -> dict[str, list[str]]:
    """``Key=value`` lines of a systemd unit by key, in order (keys may repeat)."""
    entries: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            entries.setdefault(key.strip(), []).append(value.strip())
    return entries


def unit_value(key: str) -> str:
    values = unit_entries(UNIT.read_text())[key]
    assert len(values) == 1, f"{key} set {len(values)} times"
    return values[0]


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined and comment
    lines (also those inside a continuation) dropped."""
    lines = [ln for ln in DOCKERFILE.read_text().splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            instruction, _, args = line.strip().partition(" ")
            out.append((instruction.upper(), args.strip()))
    return out


def seconds(value: str) -> float:
    """A duration as systemd or compose writes it: ``180``, ``180s``, ``3min``, ``3m``."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(s|m|min)?", value.strip())
    assert match, f"cannot read {value!r} as a duration"
    number, unit = match.groups()
    return float(number) * (60 if unit in ("m", "min") else 1)


# -- every file ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", YAML_FILES, ids=[str(p.relative_to(DEPLOY)) for p in YAML_FILES])
def test_yaml_file_parses(path: Path) -> None:
    docs = list(yaml.safe_load_all(path.read_text()))
    assert docs
    assert all(isinstance(doc, dict) for doc in docs)


def test_every_pacer_variable_named_under_deploy_is_a_setting() -> None:
    known = {var.name for var in variables()}
    for path in sorted(p for p in DEPLOY.rglob("*") if p.is_file()):
        named = set(re.findall(r"\bPACER_[A-Z][A-Z0-9_]*", path.read_text()))
        assert named <= known, f"{path.relative_to(ROOT)}: {sorted(named - known)}"


def env_file_lines() -> list[tuple[bool, str, str]]:
    """(assigned, name, value) of each ``PACER_*=`` line of pacer.env, commented out or not."""
    lines = re.findall(r"^(#?)(PACER_\w+)=(.*)$", ENV_FILE.read_text(), re.MULTILINE)
    return [(not hash_, name, value) for hash_, name, value in lines]


def env_file_settings() -> dict[str, str]:
    """What pacer.env shows, its commented lines uncommented (those with a value)."""
    return {name: value for _, name, value in env_file_lines() if value}


def test_the_env_file_assigns_nothing_and_shows_the_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines = env_file_lines()
    assert not [name for assigned, name, _ in lines if assigned]  # installed, it changes nothing
    unit = unit_settings()
    defaults = {var.name: var.default for var in variables()}
    shown = {name: value for _, name, value in lines}
    assert "PACER_GPU__SHM_DIR" in shown
    for name, value in shown.items():
        if name in unit:  # the unit's value, which the file would keep
            assert value == unit[name], name
        elif value == "" or defaults[name] == "":
            assert value == defaults[name], f"{name}: unset by default"
        else:
            monkeypatch.setenv(name, value)
            shown_setting = load_settings()
            monkeypatch.delenv(name)
            assert shown_setting == load_settings(), f"{name}={value} is not the default"
    stop = re.search(r"TimeoutStopSec= in\s+# pacer.service \((\d+) s\)", ENV_FILE.read_text())
    assert stop is not None
    assert seconds(stop[1]) == seconds(unit_value("TimeoutStopSec"))


def dockerfile_assignments(kind: str) -> dict[str, str]:
    """``KEY=value`` pairs of the Dockerfile's ENV or ARG instructions, later ones winning."""
    out: dict[str, str] = {}
    for instruction, args in dockerfile_instructions():
        if instruction == kind:
            pairs = (word.partition("=") for word in shlex.split(args))
            out |= {key: value for key, _, value in pairs}
    return out


def dockerfile_settings() -> dict[str, str]:
    return {k: v for k, v in dockerfile_assignments("ENV").items() if k.startswith("PACER_")}


def unit_settings() -> dict[str, str]:
    pairs = (v.partition("=") for v in unit_entries(UNIT.read_text()).get("Environment", []))
    return {key: value for key, _, value in pairs if key.startswith("PACER_")}


def configmap_settings() -> dict[str, str]:
    return {k: str(v) for k, v in k8s_object("ConfigMap")["data"].items()}


PACERS = ("pacer-1", "pacer-2")  # the compose stack's fleet


def compose_settings(service: str = PACERS[0]) -> dict[str, str]:
    env = load(COMPOSE)["services"][service]["environment"]
    return {k: str(v) for k, v in env.items()}


SETTINGS_SOURCES = {
    "systemd/pacer.env": env_file_settings,
    "systemd/pacer.service": unit_settings,
    "docker/Dockerfile": dockerfile_settings,
    "k8s/configmap.yaml": configmap_settings,
    "compose.yaml": compose_settings,
}


@pytest.mark.parametrize("source", SETTINGS_SOURCES, ids=list(SETTINGS_SOURCES))
def test_settings_load(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = SETTINGS_SOURCES[source]()
    assert settings
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    load_settings()  # raises SettingsError naming the variable


@pytest.mark.parametrize("source", SETTINGS_SOURCES, ids=list(SETTINGS_SOURCES))
def test_only_the_local_stack_allows_a_public_api_without_a_token(source: str) -> None:
    allow = SETTINGS_SOURCES[source]().get("PACER_API__ALLOW_PUBLIC", "false")
    assert allow.lower() == ("true" if source == "compose.yaml" else "false")


# -- Prometheus ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["check", "rules", "deploy/prometheus/rules.yml"],
        ["test", "rules", "deploy/prometheus/rules.test.yml"],
        ["check", "config", "deploy/prometheus/prometheus.yml"],
    ],
    ids=["check-rules", "test-rules", "check-config"],
)
def test_promtool_accepts(args: list[str], promtool: str) -> None:
    proc = subprocess.run([promtool, *args], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rules_select_only_exported_metrics() -> None:
    exported = exported_metric_names() | {"up"}
    for rule in rules():
        named = promql_metric_names(rule["expr"])
        assert named, rule["alert"]
        assert named <= exported, f"{rule['alert']}: {sorted(named - exported)}"
        prose = " ".join(rule["annotations"].values())
        mentioned = set(re.findall(r"\bpacer_\w+", prose))
        assert mentioned <= exported, f"{rule['alert']} annotations: {sorted(mentioned - exported)}"


def test_metric_name_extraction_sees_through_promql() -> None:
    expr = (
        'increase(a_total{x="b(c)"}[10m]) > 5 and on (job, instance) '
        "min by (job) (min_over_time(d[30m])) > 0 and bool e offset 5m"
    )
    assert promql_metric_names(expr) == {"a_total", "d", "e"}


def test_alerts_are_actionable() -> None:
    names = [rule["alert"] for rule in rules()]
    assert len(names) == len(set(names))
    for rule in rules():
        assert rule.get("for"), rule["alert"]
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), rule["alert"]
        assert "{{ $labels.instance }}" in rule["annotations"]["summary"], rule["alert"]
        description = rule["annotations"]["description"]
        assert "{{ $labels.instance }}" in description, rule["alert"]
        assert "PACER_" in description, f"{rule['alert']}: name the setting to look at"


RUNBOOK = ROOT / "docs" / "runbook.md"
RUNBOOK_URL = "https://github.com/example/pacer/blob/main/docs/runbook.md#"


def test_every_alert_links_its_own_section_of_the_runbook() -> None:
    sections = re.findall(r"^## (\S+)$", RUNBOOK.read_text(), re.M)
    assert sorted(sections) == sorted(rule["alert"] for rule in rules())  # one each, no more
    for rule in rules():
        url = rule["annotations"]["runbook_url"]
        assert url == RUNBOOK_URL + rule["alert"].lower(), rule["alert"]  # GitHub's anchor


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    cases: dict[str, set[bool]] = {}
    for test in load(PROMETHEUS / "rules.test.yml")["tests"]:
        for case in test.get("alert_rule_test", []):
            cases.setdefault(case["alertname"], set()).add(bool(case["exp_alerts"]))
    for rule in rules():
        assert cases.get(rule["alert"]) == {True, False}, rule["alert"]


def test_prometheus_config_scrapes_pacer_and_loads_the_rules() -> None:
    config = load(PROMETHEUS / "prometheus.yml")
    assert config["global"]["scrape_interval"] == "15s"
    assert config["global"]["evaluation_interval"] == "15s"
    for name in config["rule_files"]:
        assert (PROMETHEUS / name).is_file(), name
    (job,) = [job for job in config["scrape_configs"] if job["job_name"] == "pacer"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == [f"{name}:9470" for name in PACERS]
    (target_down,) = [rule for rule in rules() if rule["alert"] == "PacerTargetDown"]
    assert 'job="pacer"' in target_down["expr"]


# -- Kubernetes ------------------------------------------------------------------------------


def test_prometheusrule_holds_exactly_the_rules_of_rules_yml() -> None:
    rule = k8s_object("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"]["groups"] == load(PROMETHEUS / "rules.yml")["groups"]


def test_kustomization_lists_every_manifest() -> None:
    listed = set(load(K8S / "kustomization.yaml")["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present
    for name in listed:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            if doc["kind"] != "Namespace":
                assert doc["metadata"]["namespace"] == "pacer", name


def test_daemonset_runs_on_gpu_nodes_with_one_gpu() -> None:
    spec = k8s_object("DaemonSet")["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    assert pacer_container()["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_daemonset_outlasts_the_drain() -> None:
    spec = k8s_object("DaemonSet")["spec"]["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] > longest_stop_s(configmap_settings())


def test_daemonset_probes_health_and_readiness_on_the_named_port() -> None:
    container = pacer_container()
    (port,) = container["ports"]
    assert port == {"name": "http-metrics", "containerPort": 9470, "protocol": "TCP"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}


def test_daemonset_runs_unprivileged_with_settings_and_token_from_the_cluster() -> None:
    pod = k8s_object("DaemonSet")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    container = pacer_container()
    assert "runAsUser" not in container.get("securityContext", {})
    assert container["envFrom"] == [
        {"configMapRef": {"name": k8s_object("ConfigMap")["metadata"]["name"]}}
    ]
    (token,) = [env for env in container["env"] if env["name"] == "PACER_API__TOKEN"]
    assert "secretKeyRef" in token["valueFrom"]
    assert "PACER_API__TOKEN" not in configmap_settings()


def test_daemonset_takes_a_fleets_journal_from_a_secret_and_names_pods_by_node() -> None:
    env = {entry["name"]: entry for entry in pacer_container()["env"]}
    secret = env["PACER_JOURNAL__URL"]["valueFrom"]["secretKeyRef"]
    assert secret["optional"] is True  # without the Secret: SQLite on the node
    assert secret["name"] != "pacer-api"
    assert "PACER_JOURNAL__URL" not in configmap_settings()
    assert env["PACER_JOURNAL__HOST"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert f"secret generic {secret['name']}" in (K8S / "daemonset.yaml").read_text()


def test_daemonset_keeps_the_journal_on_the_node() -> None:
    pod = k8s_object("DaemonSet")["spec"]["template"]["spec"]
    (mount,) = [m for m in pacer_container()["volumeMounts"] if m["mountPath"] == "/var/lib/pacer"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["hostPath"]["path"] == "/var/lib/pacer"
    journal = configmap_settings()["PACER_JOURNAL__PATH"]
    assert Path(journal).parent == Path(mount["mountPath"])


def test_daemonset_keeps_the_pool_in_node_memory_that_outlives_the_pod() -> None:
    pod = k8s_object("DaemonSet")["spec"]["template"]["spec"]
    (mount,) = [m for m in pacer_container()["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert "emptyDir" not in volume  # an emptyDir, even in memory, goes with its pod
    assert volume["hostPath"]["path"].startswith("/dev/shm/")  # the node's tmpfs: RAM
    assert volume["hostPath"]["type"] == "DirectoryOrCreate"
    (owner,) = pod["initContainers"]
    assert "/dev/shm" in owner["command"]  # pacer's user may write it
    assert {"name": mount["name"], "mountPath": "/dev/shm"} in owner["volumeMounts"]
    assert configmap_settings()["PACER_GPU__KEEP_POOL"] == "true"


def test_daemonset_stops_a_nodes_pod_before_its_replacement_starts() -> None:
    strategy = k8s_object("DaemonSet")["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate"
    # No surge: the old pod drains and keeps its pool, then the new one adopts it; two pods
    # on a node at once would mean two pools.
    assert strategy["rollingUpdate"]["maxSurge"] == 0
    assert strategy["rollingUpdate"]["maxUnavailable"] >= 1


def test_podmonitor_scrapes_the_pods_as_job_pacer() -> None:
    monitor = k8s_object("PodMonitor")
    labels = k8s_object("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    spec = monitor["spec"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    assert labels[spec["jobLabel"]] == "pacer"  # what PacerTargetDown selects
    (endpoint,) = spec["podMetricsEndpoints"]
    assert endpoint["port"] in [port["name"] for port in pacer_container()["ports"]]
    assert endpoint["path"] == "/metrics"
    assert endpoint["interval"] == "15s"


# -- systemd ---------------------------------------------------------------------------------


def test_unit_is_a_notify_service_that_settles_then_serves() -> None:
    assert unit_value("Type") == "notify"
    assert unit_value("NotifyAccess") == "main"
    settle = [cmd for cmd in unit_entries(UNIT.read_text())["ExecStartPre"] if "settle" in cmd]
    assert settle == ["/usr/local/bin/pacer settle --timeout 900"]
    assert unit_value("ExecStart") == "/usr/local/bin/pacer serve"
    assert seconds(unit_value("TimeoutStartSec")) > 900
    assert unit_value("StateDirectory") == "pacer"
    assert unit_value("WorkingDirectory") == "/var/lib/pacer"


def test_unit_keeps_the_pool_in_its_descriptor_store_across_restarts() -> None:
    assert unit_settings()["PACER_GPU__KEEP_POOL"] == "true"
    # Room for a memfd per slot of a large pool (a 700 GiB budget of 3 GiB partitions: 234).
    assert int(unit_value("FileDescriptorStoreMax")) >= 256
    assert unit_value("RemoveIPC") == "no"  # blocks kept in /dev/shm are the user's IPC
    settle = [cmd for cmd in unit_entries(UNIT.read_text())["ExecStartPre"] if "settle" in cmd]
    assert all("--drop-kept" not in cmd for cmd in settle)  # settle leaves the kept pool


def test_unit_gives_the_drain_time_to_finish() -> None:
    assert unit_value("KillSignal") == "SIGTERM"
    assert unit_value("KillMode") == "mixed"
    assert seconds(unit_value("TimeoutStopSec")) > longest_stop_s(env_file_settings())


def test_unit_reaches_the_gpus_and_pins_memory() -> None:
    entries = unit_entries(UNIT.read_text())
    assert unit_value("LimitMEMLOCK") == "infinity"
    assert unit_value("PrivateDevices") == "no"
    allowed = {value.split()[0] for value in entries["DeviceAllow"]}
    assert {"char-nvidia", "char-nvidia-uvm"} <= allowed
    assert unit_value("NoNewPrivileges") == "yes"
    assert "MemoryDenyWriteExecute" not in entries  # the CUDA JIT writes code


@pytest.mark.slow
def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    true = shutil.which("true")
    if analyze is None or true is None:
        pytest.skip("systemd-analyze is not installed")
    # verify fails on an Exec line whose program is missing, and pacer is not installed at
    # /usr/local/bin here: point those lines at true(1). User=pacer may stay, verify does not
    # look the user up. It reports unknown keys and bad values on stderr but still exits 0, so
    # any line that names the file fails the test too.
    unit = tmp_path / "pacer.service"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/pacer", true))
    proc = subprocess.run(
        [analyze, "verify", "--man=no", str(unit)], capture_output=True, text=True
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert str(unit) not in output


# -- Docker ----------------------------------------------------------------------------------


def test_dockerfile_builds_a_cuda_image_that_runs_pacer_unprivileged() -> None:
    instructions = dockerfile_instructions()
    args = dockerfile_assignments("ARG")
    stages = [a.split()[0] for i, a in instructions if i == "FROM"]
    assert len(stages) >= 2, "multi-stage"
    base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], stages[-1])
    assert base.startswith("nvidia/cuda:")
    assert "runtime" in base
    runs = " ".join(a for i, a in instructions if i == "RUN")
    assert "pip install --constraint constraints.txt '.[gpu,postgres]'" in runs  # and a fleet
    last = {i: a for i, a in instructions}  # the last of each instruction
    assert last["USER"].split(":")[0] not in ("root", "0")
    assert json.loads(last["ENTRYPOINT"]) == ["pacer"]
    assert json.loads(last["CMD"]) == ["serve"]
    assert last["STOPSIGNAL"] == "SIGTERM"
    assert last["EXPOSE"] == "9470"
    assert last["VOLUME"] == "/var/lib/pacer"
    assert "/healthz" in last["HEALTHCHECK"]
    env = dockerfile_assignments("ENV")
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert env["PACER_API__HOST"] == "0.0.0.0"
    assert env["PACER_JOURNAL__PATH"].startswith("/var/lib/pacer/")


def test_dockerfile_copies_what_the_context_holds_and_its_ignore_file_keeps() -> None:
    kept = [
        line[1:].rstrip("/")
        for line in (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    for instruction, args in dockerfile_instructions():
        if instruction == "COPY" and not args.startswith("--from"):
            *sources, _ = shlex.split(args)
            for source in sources:
                assert (ROOT / source).exists(), source
                assert source.rstrip("/") in kept, f"{source} is not in Dockerfile.dockerignore"


# -- compose ---------------------------------------------------------------------------------


def compose_bind_sources() -> list[tuple[str, Path]]:
    """(service, source) of every bind mount in compose.yaml, resolved from deploy/."""
    out = []
    for name, service in load(COMPOSE)["services"].items():
        for volume in service.get("volumes", []):
            if isinstance(volume, dict):
                if volume["type"] == "bind":
                    out.append((name, DEPLOY / volume["source"]))
            elif volume.startswith((".", "/")):
                out.append((name, DEPLOY / volume.split(":")[0]))
    return out


@pytest.mark.parametrize("name", PACERS)
def test_compose_builds_pacer_from_the_repository(name: str) -> None:
    service = load(COMPOSE)["services"][name]
    context = (DEPLOY / service["build"]["context"]).resolve()
    assert context == ROOT
    assert (context / service["build"]["dockerfile"]).resolve() == DOCKERFILE
    assert service["environment"]["PACER_WORKLOAD"] == "ntt"  # runs without a GPU
    assert seconds(service["stop_grace_period"]) > longest_stop_s(compose_settings(name))
    assert any(str(port).endswith(":9470") for port in service["ports"])


def test_compose_runs_a_fleet_of_two_pacers_on_one_postgresql(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    services = load(COMPOSE)["services"]
    assert set(services) == {"postgres", *PACERS, "prometheus", "grafana"}
    database = services["postgres"]
    assert database["image"].startswith("postgres:")
    assert "pg_isready" in database["healthcheck"]["test"]
    db = database["environment"]
    url = f"postgresql://{db['POSTGRES_USER']}:{db['POSTGRES_PASSWORD']}@postgres:5432/"
    settings = [compose_settings(name) for name in PACERS]
    assert all(s["PACER_JOURNAL__URL"] == url + db["POSTGRES_DB"] for s in settings)
    assert [s.pop("PACER_JOURNAL__HOST") for s in settings] == list(PACERS)  # unique names
    assert settings[0] == settings[1]  # but for its name, one pacer is the other
    published = [services[name]["ports"][0].rsplit(":", 2)[1] for name in PACERS]
    assert len(set(published)) == len(PACERS)
    for name in PACERS:
        assert services[name]["depends_on"]["postgres"] == {"condition": "service_healthy"}
    for key, value in compose_settings(PACERS[1]).items():
        monkeypatch.setenv(key, value)
    assert load_settings().journal.fleet


def test_compose_mounts_files_that_exist() -> None:
    sources = compose_bind_sources()
    assert {name for name, _ in sources} == {"prometheus", "grafana"}
    missing = [str(path.resolve().relative_to(ROOT)) for _, path in sources if not path.exists()]
    assert not missing, f"compose.yaml mounts missing files: {missing}"


def test_compose_prometheus_scrapes_the_pacer_service() -> None:
    services = load(COMPOSE)["services"]
    assert services["prometheus"]["image"].startswith("prom/prometheus:v3.")
    assert services["grafana"]["image"].startswith("grafana/grafana:11.")
    config = load(PROMETHEUS / "prometheus.yml")
    targets = [
        t for job in config["scrape_configs"] for c in job["static_configs"] for t in c["targets"]
    ]
    for target in targets:
        host, _, port = target.partition(":")
        assert host in services
        assert port == "9470"


# -- the image's dependencies ------------------------------------------------------------------

CONSTRAINTS = DOCKERFILE.parent / "constraints.txt"


def constraint_pins() -> dict[str, str]:
    """constraints.txt as {normalized name: version}; every line a ``name==version``."""
    pins: dict[str, str] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            match = re.fullmatch(r"([A-Za-z0-9][\w.-]*)==([\w.+!-]+)", line.strip())
            assert match, f"constraints.txt: {line!r} is not name==version"
            pins[canonicalize_name(match[1])] = match[2]
    return pins


def image_requirements() -> list[Requirement]:
    """What the image installs: pacer's dependencies and its gpu and postgres extras."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return [Requirement(r) for r in [*project["dependencies"], *extras["gpu"], *extras["postgres"]]]


def test_the_image_installs_with_the_constraints() -> None:
    copies = [shlex.split(args) for kind, args in dockerfile_instructions() if kind == "COPY"]
    assert ["deploy/docker/constraints.txt", "./constraints.txt"] in copies
    installs = [args for kind, args in dockerfile_instructions()
                if kind == "RUN" and "pip install" in args]  # fmt: skip
    assert installs
    assert all("--constraint constraints.txt '.[gpu,postgres]'" in args for args in installs)


NEEDED_BY_UNINSTALLED = {"cuda-pathfinder": "cupy-cuda12x"}
"""Pins whose need this machine cannot read: the package needing them is not installed here
(CuPy needs a GPU machine)."""


def test_the_constraints_pin_every_runtime_dependency_within_its_range() -> None:
    pins = constraint_pins()
    wanted = [(r, set(r.extras)) for r in image_requirements()]
    seen: set[str] = set()
    while wanted:
        requirement, extras = wanted.pop()
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} ({requirement}) is not pinned"
        assert requirement.specifier.contains(pins[name], prereleases=True), (name, pins[name])
        if name in seen:
            continue
        seen.add(name)
        try:  # what it needs in turn (with the extras asked of it), where installed to say so
            needs = distribution(name).requires or []
        except PackageNotFoundError:
            continue
        for need in map(Requirement, needs):
            if not need.marker or any(need.marker.evaluate({"extra": e}) for e in {"", *extras}):
                wanted.append((need, set(need.extras)))
    unread = {pin: NEEDED_BY_UNINSTALLED.get(pin) for pin in set(pins) - seen}
    for pin, needed_by in unread.items():
        assert needed_by is not None, f"{pin} is pinned but not needed"
        with pytest.raises(PackageNotFoundError):  # else its needs are read above
            distribution(needed_by)
