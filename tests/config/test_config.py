from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from pacer.config import (
    Settings,
    SettingsError,
    TimeoutSettings,
    effective,
    env_name,
    load_settings,
    markdown_table,
    variables,
)

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_load() -> None:
    settings = load_settings()
    assert settings.controller.target_ready == 8.0
    assert settings.synthesis.cores == (os.cpu_count() or 1)


def test_nested_variable_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PACER_CONTROLLER__KP", "0.4")
    monkeypatch.setenv("PACER_MEMORY__BUDGET_BYTES", "700GiB")
    settings = load_settings()
    assert settings.controller.kp == 0.4
    assert settings.memory.budget_bytes == 700 * 2**30


@pytest.mark.parametrize(
    ("value", "loaded"),
    [("/dev/shm/pacer/", "/dev/shm/pacer"), ("pacer", None)],
    ids=["absolute", "relative"],
)
def test_the_shm_dir_is_an_absolute_path(
    monkeypatch: pytest.MonkeyPatch, value: str, loaded: str | None
) -> None:
    monkeypatch.setenv("PACER_GPU__SHM_DIR", value)
    if loaded is not None:
        assert load_settings().gpu.shm_dir == loaded
        return
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert str(info.value) == (
        "PACER_GPU__SHM_DIR: must be an absolute path, such as /dev/shm (got 'pacer')"
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"PACER_CONTROLLER__KP": "-1"}, "PACER_CONTROLLER__KP: Input should be greater than or"),
        ({"PACER_CONTROLLER__KP": "fast"}, "PACER_CONTROLLER__KP: Input should be a valid number"),
        ({"PACER_SYNTHESIS__CORES": "0"}, "PACER_SYNTHESIS__CORES: Input should be greater than"),
        (
            {"PACER_CONTROLLER__INTERVAL_MIN_S": "90"},
            "PACER_CONTROLLER__INTERVAL_MIN_S (90.0) must be less than "
            "PACER_CONTROLLER__INTERVAL_MAX_S (60.0)",
        ),
        (
            {"PACER_MEMORY__PARTITION_BYTES": "2TiB", "PACER_MEMORY__BUDGET_BYTES": "1TiB"},
            "PACER_MEMORY__PARTITION_BYTES (2199023255552) must not exceed "
            "PACER_MEMORY__BUDGET_BYTES",
        ),
        ({"PACER_CONTROLLER__KPP": "1"}, "PACER_CONTROLLER__KPP: not a pacer setting"),
        (
            {"PACER_NTT__KERNEL": "numba"},
            "PACER_NTT__KERNEL: renamed PACER_NTT__CPU_BACKEND; set that instead",
        ),
        (
            {"PACER_CONTROLLER__POLICY": "fixed"},
            "PACER_CONTROLLER__POLICY: Input should be 'pi', 'unpaced', 'cuzk' or 'cuzk-default' "
            "(got 'fixed')",
        ),
        ({"PACER_MEMORY__BUDGET_BYTES": "lots"}, "PACER_MEMORY__BUDGET_BYTES: could not parse"),
        (
            {"PACER_SYNTHESIS__EXECUTOR": "fork"},
            "PACER_SYNTHESIS__EXECUTOR: Input should be 'threads' or 'processes' (got 'fork')",
        ),
        ({"PACER_NTT__LOG_N": "31"}, "PACER_NTT__LOG_N: Input should be less than or equal to 30"),
        ({"PACER_CONTROLLER__KP": "inf"}, "PACER_CONTROLLER__KP: Input should be a finite number"),
        (
            {"PACER_CONTROLLER__TARGET_READY": "1e400"},
            "PACER_CONTROLLER__TARGET_READY: Input should be a finite number",
        ),
        (
            {"PACER_CONTROLLER__SPREAD_SIGMAS": "nan"},
            "PACER_CONTROLLER__SPREAD_SIGMAS: Input should be a finite number",
        ),
        (
            {"PACER_SHUTDOWN__DRAIN_S": "1e300"},
            "PACER_SHUTDOWN__DRAIN_S: Input should be less than or equal to 86400",
        ),
        (
            {"PACER_MEMORY__BUDGET_BYTES": "99999999TiB"},
            "PACER_MEMORY__BUDGET_BYTES: Input should be less than or equal to",
        ),
        ({"PACER_API__TOKEN": ""}, "PACER_API__TOKEN: must be at least 16 characters, got 0"),
        ({"PACER_API__TOKEN": "x"}, "PACER_API__TOKEN: must be at least 16 characters, got 1"),
        (
            {"PACER_API__TOKEN": "sixteen chars ok"},
            "PACER_API__TOKEN: must be visible ASCII characters without spaces",
        ),
        (
            {"PACER_API__HEADER_TIMEOUT_S": "0"},
            "PACER_API__HEADER_TIMEOUT_S: Input should be greater than 0",
        ),
        ({"PACER_API__MAX_BACKLOG": "0"}, "PACER_API__MAX_BACKLOG: Input should be greater than"),
        (
            {"PACER_NTT__FIELD": "bn254"},
            "PACER_NTT__FIELD: Input should be 'babybear' or 'goldilocks' (got 'bn254')",
        ),
        ({"PACER_JOURNAL__URL": "mysql://u:pw@db/x"},
         "PACER_JOURNAL__URL: must be postgresql://…, sqlite:///… (with a path) or a path"),
        ({"PACER_JOURNAL__URL": "sqlite:///"}, "PACER_JOURNAL__URL: must be postgresql://…"),
        ({"PACER_JOURNAL__URL": "postgresql://u:p@[::1/db"},
         "PACER_JOURNAL__URL: is not a URL a PostgreSQL database can be reached at (Invalid "
         "IPv6 URL)"),
        ({"PACER_JOURNAL__URL": "postgresql://u:p@db:99999/x"},
         "PACER_JOURNAL__URL: is not a URL a PostgreSQL database can be reached at (Port out of "
         "range 0-65535)"),
        ({"PACER_JOURNAL__URL": "postgresql://u:p@db1:5432,db2:99999/x"},
         "PACER_JOURNAL__URL: is not a URL a PostgreSQL database can be reached at (Port out of "
         "range 0-65535)"),
        ({"PACER_API__ALLOWED_HOSTS": "pacer.internal, evil/x"},
         "PACER_API__ALLOWED_HOSTS: must be host names (letters, digits, '.', '-', '_') or *"),
        ({"PACER_JOURNAL__URL": "a.sqlite", "PACER_JOURNAL__PATH": "b.sqlite"},
         "PACER_JOURNAL__URL and PACER_JOURNAL__PATH both name the SQLite file"),
        ({"PACER_JOURNAL__HOST": "gpu 1"}, "PACER_JOURNAL__HOST: must be visible ASCII"),
        ({"PACER_JOURNAL__LEASE_S": "0.1"}, "PACER_JOURNAL__LEASE_S: Input should be greater"),
        ({"PACER_JOURNAL__CLAIM_MAX": "10001"}, "PACER_JOURNAL__CLAIM_MAX: Input should be less"),
        ({"PACER_JOURNAL__STALL_S": "0"},
         "PACER_JOURNAL__STALL_S: Input should be greater than 0"),
        ({"PACER_JOURNAL__STALL_S": "5"},
         "PACER_JOURNAL__STALL_S (5 s) must be more than PACER_JOURNAL__BUSY_TIMEOUT_S (5 s): "
         "a write may wait that long on a lock"),
        ({"PACER_JOURNAL__URL": "postgresql://db/x", "PACER_JOURNAL__TIMEOUT_S": "60"},
         "PACER_JOURNAL__STALL_S (30 s) must be more than PACER_JOURNAL__TIMEOUT_S (60 s)"),
    ],
    ids=[
        "negative",
        "not-a-number",
        "zero-cores",
        "limits-order",
        "partition-too-big",
        "typo",
        "renamed",
        "unknown-policy",
        "bad-size",
        "unknown-executor",
        "log-n-past-device-indices",
        "unknown-field",
        "gain-inf",
        "setpoint-overflow",
        "sigmas-nan",
        "drain-absurd",
        "budget-absurd",
        "token-empty",
        "token-one-character",
        "token-with-spaces",
        "header-timeout-zero",
        "backlog-zero",
        "journal-scheme",
        "journal-no-path",
        "journal-url-ipv6-unclosed",
        "journal-url-port",
        "journal-url-second-port",
        "allowed-hosts",
        "journal-url-and-path",
        "journal-host-space",
        "journal-lease-short",
        "journal-claim-max",
        "journal-stall-zero",
        "journal-stall-within-busy-timeout",
        "journal-stall-within-statement-timeout",
    ],
)  # fmt: skip
def test_invalid_value_names_variable_and_rule(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert any(p.startswith(expected) for p in info.value.problems), info.value.problems


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PACER_API__TOKEN", "hunter2"),
        ("PACER_JOURNAL__URL", "mysql://pacer:hunter2@db/x"),
        ("PACER_JOURNAL__URL", "postgresql://pacer:hunter2@[::1/db"),
        ("PACER_JOURNAL__URL", "postgresql://pacer:hunter2@db:hunter2/db"),
    ],
    ids=["token", "journal-url", "journal-url-ipv6", "journal-url-port"],
)
def test_a_refused_secret_is_not_echoed(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize(
    ("env", "location", "fleet"),
    [
        ({}, "pacer-journal.sqlite", False),
        ({"PACER_JOURNAL__PATH": "/var/j.sqlite"}, "/var/j.sqlite", False),
        ({"PACER_JOURNAL__URL": "sqlite:///rel/j.sqlite"}, "rel/j.sqlite", False),
        ({"PACER_JOURNAL__URL": "sqlite:////abs/j.sqlite"}, "/abs/j.sqlite", False),
        ({"PACER_JOURNAL__URL": "plain.sqlite"}, "plain.sqlite", False),
        ({"PACER_JOURNAL__URL": "postgresql://pacer:pw@db:5432/pacer"},
         "postgresql://pacer:***@db:5432/pacer", True),
        ({"PACER_JOURNAL__URL": "postgres://db/pacer?password=pw&sslmode=require"},
         "postgres://db/pacer?password=***&sslmode=require", True),
        ({"PACER_JOURNAL__URL":
          "postgresql://u:pw@[::1]:5432/p?sslpassword=pw&passfile=/pw&sslkey=/k&Auth_Token=pw"},
         "postgresql://u:***@[::1]:5432/p?sslpassword=***&passfile=***&sslkey=***&Auth_Token=***",
         True),
        ({"PACER_JOURNAL__URL": "postgresql://u:pw@db1:5432,[::1]:5433/p?target_session_attrs=any"},
         "postgresql://u:***@db1:5432,[::1]:5433/p?target_session_attrs=any", True),
    ],
    ids=["default", "path", "relative", "absolute", "bare-path", "postgresql", "password-param",
         "every-secret", "several-servers"],
)  # fmt: skip
def test_the_journal_url_names_an_sqlite_file_or_a_fleets_database(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], location: str, fleet: bool
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    journal = load_settings().journal
    assert (journal.location, journal.fleet) == (location, fleet)
    assert "pw" not in journal.location
    if fleet:
        assert journal.postgres_url == env["PACER_JOURNAL__URL"]
        assert journal.write_timeout_s == journal.timeout_s
    else:
        assert str(journal.sqlite_path) == location


def test_every_number_of_the_schema_is_bounded_on_both_sides() -> None:
    for var_name, field in numeric_fields():
        bounds = {type(rule).__name__ for rule in field.metadata}
        assert bounds & {"Ge", "Gt"}, f"{var_name} has no lower bound"
        assert bounds & {"Le", "Lt"}, f"{var_name} has no upper bound"


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e400"])
def test_no_number_of_the_schema_takes_a_non_finite_value(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    for var_name, _ in numeric_fields():
        monkeypatch.setenv(var_name, value)
        with pytest.raises(SettingsError) as info:
            load_settings()
        assert any(p.startswith(f"{var_name}:") for p in info.value.problems), var_name
        monkeypatch.delenv(var_name)


def numeric_fields() -> list[tuple[str, Any]]:
    """(variable, field) of every int, float or byte-size setting."""
    out = []
    for name, top in Settings.model_fields.items():
        section = top.annotation
        fields = (
            section.model_fields.items()
            if isinstance(section, type) and issubclass(section, BaseModel)
            else [(None, top)]
        )
        for field_name, field in fields:
            annotation = str(field.annotation)
            if any(kind in annotation for kind in ("int", "float", "ByteSize")):
                out.append((env_name((name,) if field_name is None else (name, field_name)), field))
    assert len(out) > 25
    return out


@pytest.mark.parametrize("call", ["synthesis", "prove", "verify"])
def test_each_call_limit_and_its_floor_are_bounded_to_a_day_and_name_each_other(call: str) -> None:
    limit, floor = f"{call}_s", f"{call}_floor_s"
    accepted = TimeoutSettings.model_validate({limit: 0, floor: 86400})
    assert (getattr(accepted, limit), getattr(accepted, floor)) == (0, 86400)
    for refused in ({limit: -1}, {limit: 86401}, {floor: 0}, {floor: 86401}):
        with pytest.raises(ValidationError):
            TimeoutSettings.model_validate(refused)
    fields = TimeoutSettings.model_fields
    assert f"; 0: max({floor}, estimate_multiple × the " in str(fields[limit].description)
    assert str(fields[floor].description).startswith("Least derived ")


@pytest.mark.slow
def test_cli_invalid_setting_exits_nonzero_without_traceback() -> None:
    env = {**os.environ, "PACER_CONTROLLER__TARGET_READY": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "pacer", "config"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "PACER_CONTROLLER__TARGET_READY: Input should be greater than 0" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_config_prints_every_variable_with_effective_value(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pacer.__main__ import main

    monkeypatch.setenv("PACER_CONTROLLER__KI", "0.02")
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert "PACER_CONTROLLER__KI=0.02\n" in out
    names = re.findall(r"^#?(PACER_\w+)=", out, flags=re.M)  # unset ones commented out
    assert names == [v.name for v in variables()]
    assert [name for name, _ in ((v.name, x) for v, x in effective(load_settings()))] == names


def test_every_variable_has_a_description_with_unit() -> None:
    for var in variables():
        assert re.search(r"\(.+\)\s*$", var.description), var.name


def test_the_settings_table_is_current() -> None:
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    begin, end = "<!-- settings-table:begin -->", "<!-- settings-table:end -->"
    assert begin in page
    assert end in page
    current = page.split(begin, 1)[1].split(end, 1)[0].strip()
    assert current == markdown_table(), (
        "docs/settings.md's table is stale: regenerate it with `pacer config --markdown`"
    )


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```sh\n(.+?)\n```", readme, flags=re.S)
    test_command = blocks[1]
    assert "pytest" in test_command
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1] == test_command
