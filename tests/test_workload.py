from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from gpu.reference.ntt import H_PHASES
from gpu.workload import NttWorkload
from pacer.config import Settings
from pacer.workload import (
    NoopWorkload,
    PartitionSpec,
    PooledWorkload,
    Proof,
    Workload,
    WorkloadError,
    contract_members,
    job_seed,
    load_workload,
    pooled,
)


class Custom(Workload):
    """A workload of one's own: the five calls; the contract's defaults for the rest."""

    name = "custom"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return dict(params)

    def partition_bytes(self, params: Mapping[str, Any]) -> int:
        return 1

    def synthesize(self, spec: PartitionSpec) -> Any:
        return spec.index

    def prove(self, buffers: Any, worker: int, keep_output: bool = True) -> Proof:
        return Proof(str(buffers))

    def verify(self, spec: PartitionSpec, buffers: Any, proof: Proof) -> bool:
        return proof.digest == str(buffers)


class OldStyle:
    """The five calls, not derived from Workload: it lacks the rest of the contract."""

    name = "old"
    check_params = Custom.check_params
    partition_bytes = Custom.partition_bytes
    synthesize = Custom.synthesize
    prove = Custom.prove
    verify = Custom.verify


@pytest.fixture
def user_module() -> Iterator[str]:
    module = types.ModuleType("pacer_test_user_workload")
    module.make = Custom  # type: ignore[attr-defined]
    module.old = lambda settings: OldStyle()  # type: ignore[attr-defined]
    module.not_a_workload = lambda settings: object()  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module.__name__
    del sys.modules[module.__name__]


@pytest.mark.parametrize("name", ["ntt", "gpu.workload:ntt"], ids=["short", "module"])
def test_the_ntt_workload_loads_by_either_name(name: str) -> None:
    assert isinstance(load_workload(Settings(workload=name, gpu={"devices": "none"})), NttWorkload)


def test_the_default_workload_is_the_ntt_one_and_noop_is_built_in() -> None:
    assert Settings().workload == "gpu.workload:ntt"
    assert isinstance(load_workload(Settings(workload="noop")), NoopWorkload)


def test_user_workload_loads_from_module_and_factory_with_the_defaults(user_module: str) -> None:
    settings = Settings(workload=f"{user_module}:make")
    workload = load_workload(settings)
    assert isinstance(workload, Custom)
    assert workload.settings is settings
    assert (workload.threads_per_synthesis, workload.verify_every, workload.workers) == (4, 1, None)
    assert (workload.device_of(3), workload.gpu_model, workload.synthesis_restarts) == (
        3,
        "none",
        0,
    )
    assert (workload.executor, workload.field_name, workload.log_n, workload.kernel) == (
        "threads", None, None, None
    )  # fmt: skip
    assert pooled(workload) is None
    workload.release(7)
    workload.close()


def test_the_contract_lists_every_member_and_the_pooled_one_adds_its_pool() -> None:
    members = contract_members(Workload)
    assert {"name", "prove", "release", "device_of", "verify_every", "workers"} <= set(members)
    assert set(contract_members(PooledWorkload)) - set(members) == {
        "adoptable_bytes", "keep_pool", "pool", "prepare", "prepare_phases_s"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_module_xyz:make", "cannot import no_such_module_xyz"),
        ("{mod}:missing", "has no callable missing"),
        (
            "{mod}:not_a_workload",
            "the factory returned object, which lacks abandoned, check_params, close,",
        ),
        (
            "{mod}:old",
            "the factory returned OldStyle, which lacks abandoned, close, device_of, executor, "
            "field_name, gpu_model, kernel, log_n, release, synthesis_restarts, "
            "threads_per_synthesis, verify_every, workers of the Workload contract (subclass "
            "pacer.workload.Workload",
        ),
    ],
    ids=["no-module", "no-factory", "not-a-workload", "lacks-members"],
)
def test_bad_user_workload_is_explained(user_module: str, name: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=re.escape(message)):
        load_workload(Settings(workload=name.format(mod=user_module)))


def test_ntt_workload_proves_and_verifies_and_catches_a_wrong_proof() -> None:
    workload = NttWorkload(log_n=8)
    spec = PartitionSpec("job", 3, 42, {})
    buffers = workload.synthesize(spec)
    proof = workload.prove(buffers, 0)
    assert tuple(proof.phases_s) == H_PHASES
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
