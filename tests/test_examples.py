"""The custom workload template in examples/: it keeps the Workload contract, and runs under
``pacer run`` as its docstring says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pacer.config import Settings
from pacer.pipeline.attempts import proof_problem
from pacer.workload import PartitionSpec, Proof, contract_members, load_workload
from tests.servers import ROOT

WORKLOAD = "examples.merkle_workload:make"


def test_the_template_loads_and_proves_what_it_verifies() -> None:
    workload = load_workload(Settings(workload=WORKLOAD))
    assert workload.name == "merkle"
    assert all(hasattr(workload, member) for member in contract_members(type(workload)))
    params = workload.check_params({"log_leaves": 6, "seed": 7})
    assert workload.partition_bytes(params) == 32 * 64
    spec = PartitionSpec("job", 3, 7, params)
    buffers = workload.synthesize(spec)
    assert len(buffers) == workload.partition_bytes(params)
    proof = workload.prove(buffers, worker=0)
    assert proof_problem(proof) is None  # a digest without whitespace, finite phases
    assert set(proof.phases_s) == {"split", "tree"}
    assert workload.verify(spec, buffers, proof)
    wrong = Proof(digest="0" * 64, phases_s=proof.phases_s, output=proof.output)
    assert not workload.verify(spec, buffers, wrong)
    assert workload.prove(buffers, worker=0, keep_output=False).output is None


@pytest.mark.parametrize(
    ("params", "message"),
    [({"log_leaves": 30}, "params.log_leaves: must be between 4 and 20, got 30"),
     ({"leaves": 8}, "params.leaves: unknown parameter (known: seed, log_leaves)")],
    ids=["range", "unknown"],
)  # fmt: skip
def test_the_template_refuses_bad_params_naming_them(params: dict[str, int], message: str) -> None:
    workload = load_workload(Settings(workload=WORKLOAD))
    with pytest.raises(ValueError, match=re.escape(message)):
        workload.check_params(params)


@pytest.mark.slow
def test_the_template_runs_under_pacer_run_from_the_checkout(tmp_path: Path) -> None:
    env = {**os.environ, "PACER_WORKLOAD": WORKLOAD, "TMPDIR": str(tmp_path)}
    command = [sys.executable, "-m", "pacer", "run", "--jobs", "2", "--partitions", "4",
               "--param", "log_leaves=8"]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert re.search(r"^jobs +2 completed$", done.stdout, re.M), done.stdout
    assert re.search(r"^workload +merkle$", done.stdout, re.M)
    assert re.search(r"^partitions +8 of 8 done$", done.stdout, re.M)
