"""`pacer serve` begins its workload's early start before its own imports, named as the
workload is, and nothing for another command or another workload."""

from __future__ import annotations

import os

import pytest

from pacer.config import load_settings
from pacer.runtime import early_start
from pacer.runtime.early_start import WORKLOAD_ALIASES

began: list[str] = []


def _begin() -> None:
    began.append("began")


def _fail() -> None:
    raise OSError("no driver here")


@pytest.fixture(autouse=True)
def _named_here(monkeypatch: pytest.MonkeyPatch) -> None:
    began.clear()
    monkeypatch.setitem(early_start.EARLY_STARTS, early_start.DEFAULT_WORKLOAD,
                        f"{__name__}:_begin")  # fmt: skip


@pytest.mark.parametrize("environ", [{}, {"PACER_WORKLOAD": "ntt"},
                                     {"pacer_workload": "gpu.workload:ntt"}])  # fmt: skip
def test_serve_begins_the_early_start_of_the_workload_the_environment_names(
    environ: dict[str, str],
) -> None:
    assert early_start.begin(["serve", "--port", "0"], environ)
    assert began == ["began"]


@pytest.mark.parametrize(
    ("argv", "environ"),
    [
        (["config"], {}),
        (["run"], {}),
        ([], {}),
        (["serve"], {"PACER_WORKLOAD": "noop"}),
        (["serve"], {"PACER_WORKLOAD": "tests.faults:make"}),
    ],
)
def test_nothing_begins_for_another_command_or_a_workload_without_one(
    argv: list[str], environ: dict[str, str]
) -> None:
    assert not early_start.begin(argv, environ)
    assert began == []


def test_an_early_start_that_fails_is_left_to_the_first_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(early_start.EARLY_STARTS, early_start.DEFAULT_WORKLOAD,
                        f"{__name__}:_fail")  # fmt: skip
    assert not early_start.begin(["serve"], {})
    monkeypatch.setitem(early_start.EARLY_STARTS, early_start.DEFAULT_WORKLOAD,
                        "no_such_module:begin")  # fmt: skip
    assert not early_start.begin(["serve"], {})


@pytest.mark.parametrize(
    ("key", "value"), [(None, None), ("PACER_WORKLOAD", "ntt"), ("pacer_workload", "noop")]
)
def test_the_workload_is_read_as_the_settings_read_it(
    monkeypatch: pytest.MonkeyPatch, key: str | None, value: str | None
) -> None:
    for name in [k for k in os.environ if k.upper() == "PACER_WORKLOAD"]:
        monkeypatch.delenv(name)
    if key is not None and value is not None:
        monkeypatch.setenv(key, value)
    configured = load_settings().workload
    assert early_start.workload_named(os.environ) == WORKLOAD_ALIASES.get(configured, configured)
