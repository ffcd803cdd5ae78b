from __future__ import annotations

import sys
import types
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from pacer.config import Settings
from pacer.workload import (
    NoopWorkload,
    NttWorkload,
    PartitionSpec,
    Proof,
    WorkloadError,
    job_seed,
    load_workload,
)


class Custom:
    name = "custom"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return dict(params)

    def partition_bytes(self, params: Mapping[str, Any]) -> int:
        return 1

    def synthesize(self, spec: PartitionSpec) -> Any:
        return spec.index

    def prove(self, buffers: Any, worker: int) -> Proof:
        return Proof(str(buffers))

    def verify(self, spec: PartitionSpec, buffers: Any, proof: Proof) -> bool:
        return proof.digest == str(buffers)


@pytest.fixture
def user_module() -> Iterator[str]:
    module = types.ModuleType("pacer_test_user_workload")
    module.make = Custom  # type: ignore[attr-defined]
    module.not_a_workload = lambda settings: object()  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module.__name__
    del sys.modules[module.__name__]


def test_builtin_workloads_load() -> None:
    assert isinstance(load_workload(Settings(workload="ntt")), NttWorkload)
    assert isinstance(load_workload(Settings(workload="noop")), NoopWorkload)


def test_user_workload_loads_from_module_and_factory(user_module: str) -> None:
    settings = Settings(workload=f"{user_module}:make")
    workload = load_workload(settings)
    assert isinstance(workload, Custom)
    assert workload.settings is settings


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_module_xyz:make", "cannot import no_such_module_xyz"),
        ("{mod}:missing", "has no callable missing"),
        ("{mod}:not_a_workload", "the factory returned object, which lacks"),
    ],
    ids=["no-module", "no-factory", "not-a-workload"],
)
def test_bad_user_workload_is_explained(user_module: str, name: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        load_workload(Settings(workload=name.format(mod=user_module)))


def test_ntt_workload_proves_and_verifies_and_catches_a_wrong_proof() -> None:
    workload = NttWorkload(log_n=8)
    spec = PartitionSpec("job", 3, 42, {})
    buffers = workload.synthesize(spec)
    proof = workload.prove(buffers, 0)
    assert set(proof.phases_s) == {"intt", "coset_ntt", "pointwise", "coset_intt"}
    assert workload.verify(spec, buffers, proof)
    tampered = proof.output.copy()
    tampered[0] = (int(tampered[0]) + 1) % 2013265921
    assert not workload.verify(spec, buffers, Proof(proof.digest, proof.phases_s, tampered))
    assert workload.partition_bytes({}) == 3 * 8 * 256
    assert workload.partition_bytes({"log_n": 10}) == 3 * 8 * 1024


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"log_n": 3}, "params.log_n: must be between 4 and 24, got 3"),
        ({"log_n": "big"}, "params.log_n: must be an integer, got 'big'"),
        ({"seed": -1}, "params.seed: must be between 0 and"),
        ({"depth": 2}, "params.depth: unknown parameter"),
    ],
    ids=["small", "type", "seed", "unknown"],
)
def test_ntt_params_are_checked(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        NttWorkload(log_n=8).check_params(params)


def test_job_seed_is_stable_and_can_be_given() -> None:
    assert job_seed("abc", {}) == job_seed("abc", {})
    assert job_seed("abc", {}) != job_seed("abd", {})
    assert job_seed("abc", {"seed": 7}) == 7
