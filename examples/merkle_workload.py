"""A custom workload to start from: a partition is a block of leaves, its proof their Merkle root.

Run it from the root of a pacer checkout (the module must be importable where pacer runs)::

    PACER_WORKLOAD=examples.merkle_workload:make pacer run --jobs 4 --partitions 16
    PACER_WORKLOAD=examples.merkle_workload:make pacer run --param log_leaves=14

The factory ``make(settings)`` returns the workload. It subclasses `pacer.workload.Workload`:
the five methods below are the work, and every other member keeps the contract's neutral
default (one proving worker per ``PACER_GPU__WORKERS``, synthesis on threads, nothing held).
pacer calls ``synthesize`` on a CPU thread, ``prove`` on a proving worker's thread and
``verify`` on the CPU, each for one partition; they may block.

A real prover replaces the hashing with its own synthesis and GPU calls. What it must keep:
the buffers are deterministic from the `PartitionSpec` (a retry must prove the same thing), and
``prove`` returns a `pacer.workload.Proof`: its ``digest`` (a string without whitespace), its
``phases_s`` (seconds by phase name, exported as ``pacer_gpu_phase_seconds``) and an ``output``
that ``verify`` reads.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import Any

from pacer.config import Settings
from pacer.workload import PartitionSpec, Proof, Workload, check_known, int_param

LEAF_BYTES = 32  # one SHA-256 digest a leaf


class MerkleWorkload(Workload):
    """Partitions of ``2**log_leaves`` leaves of 32 bytes (job parameter ``log_leaves``, 4 to
    20, 10 by default); a proof is their Merkle root under SHA-256."""

    name = "merkle"
    threads_per_synthesis = 1  # a synthesis keeps one core busy: hashlib on one thread
    verify_every = 10  # verify every tenth proved partition, unless PACER_VERIFY_EVERY says

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Refuse what a job may not ask: ValueError naming the parameter and the rule."""
        checked = check_known(params, ("seed", "log_leaves"))
        if "log_leaves" in params:
            checked["log_leaves"] = int_param(params, "log_leaves", 4, 20, 10)
        return checked

    def partition_bytes(self, params: Mapping[str, Any]) -> int:
        """The memory one partition's buffers hold, counted against the budget (bytes)."""
        return LEAF_BYTES << int(params.get("log_leaves", 10))

    def synthesize(self, spec: PartitionSpec) -> bytes:
        """The partition's leaves, from its job's seed and its index: the same on a retry."""
        count = 1 << int(spec.params.get("log_leaves", 10))
        prefix = f"{spec.seed}:{spec.index}:".encode()
        return b"".join(hashlib.sha256(prefix + str(i).encode()).digest() for i in range(count))

    def prove(self, buffers: bytes, worker: int, keep_output: bool = True) -> Proof:
        """The leaves' Merkle root, timed by phase; the root is also the output ``verify``
        reads (none when ``keep_output`` is False: verify will not be called)."""
        started = time.perf_counter()
        level = leaves(buffers)
        split = time.perf_counter()
        root = merkle_root(level)
        ended = time.perf_counter()
        return Proof(
            digest=root.hex(),
            phases_s={"split": split - started, "tree": ended - split},
            output=root if keep_output else None,
        )

    def verify(self, spec: PartitionSpec, buffers: bytes, proof: Proof) -> bool:
        """Whether the proof is right: the root again, from leaves synthesized anew."""
        expected = merkle_root(leaves(self.synthesize(spec)))
        return proof.output == expected and proof.digest == expected.hex()


def leaves(buffers: bytes) -> list[bytes]:
    """A partition's buffers as its leaves, 32 bytes each."""
    return [buffers[i : i + LEAF_BYTES] for i in range(0, len(buffers), LEAF_BYTES)]


def merkle_root(level: list[bytes]) -> bytes:
    """The root of a binary SHA-256 tree over ``level`` (a power of two of nodes)."""
    while len(level) > 1:
        level = [hashlib.sha256(level[i] + level[i + 1]).digest() for i in range(0, len(level), 2)]
    return level[0]


def make(settings: Settings) -> MerkleWorkload:
    """The factory ``PACER_WORKLOAD=examples.merkle_workload:make`` names; ``settings`` are
    pacer's, for a workload that reads its own (this one reads none)."""
    return MerkleWorkload()
