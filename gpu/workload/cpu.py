"""The ntt workload on the CPU (`NttWorkload`): synthesis, the H computation and verification
in NumPy, or compiled by Numba (`cpu_backend_for`); the GPU workload builds on it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpu.field import by_name
from gpu.reference import cpu_backend
from pacer.workload import (
    PartitionSpec,
    Proof,
    Workload,
    WorkloadError,
    check_known,
    int_param,
)

logger = logging.getLogger("gpu.workload")


class NttWorkload(Workload):
    """The H computation over ``field`` (a `gpu.field.FIELD_NAMES` name) on the CPU (NumPy);
    ``log_n`` sets the partition size."""

    name = "ntt"
    DEFAULT_LOG_N = 18
    threads_per_synthesis = 1  # NumPy calls on one thread
    MAX_JOB_LOG_N = 24
    """Largest params.log_n a job may ask for (the configured size is always allowed)."""

    DEFAULT_FIELD = "babybear"
    """On the CPU: a product fits 64 bits, so NumPy multiplies about five times as fast."""

    def __init__(
        self, log_n: int, field: str | None = None, backend: str = "numpy", warm: bool = True
    ) -> None:
        self.field = by_name(field or self.DEFAULT_FIELD)
        if log_n > self.field.TWO_ADICITY:
            raise WorkloadError(
                f"PACER_NTT__LOG_N={log_n}: {self.field.name}'s largest domain is "
                f"2^{self.field.TWO_ADICITY}"
            )
        self.log_n: int = log_n
        # The CPU backend (`gpu.reference.cpu_backend`), under the name the Workload contract reads
        # it by.
        self.kernel: str = cpu_backend_for(backend, self.field.name)
        if warm and self.kernel == "numba":  # compiled now (or from the cache), not on a partition
            cpu_backend.warm(self.field, verification=True)

    @property
    def field_name(self) -> str:
        return self.field.name

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        out = check_known(params, ("log_n", "seed"))
        if "log_n" in params:
            high = max(min(self.MAX_JOB_LOG_N, self.field.TWO_ADICITY), self.log_n)
            out["log_n"] = int_param(params, "log_n", 4, high, self.log_n)
        return out

    def _log_n(self, params: Mapping[str, Any]) -> int:
        return int(params.get("log_n", self.log_n))

    def partition_bytes(self, params: Mapping[str, Any]) -> int:
        return 3 * 8 * (1 << self._log_n(params))  # a, b, c as uint64

    def synthesize(self, spec: PartitionSpec) -> Any:
        import gpu.reference.synthesis as synthesis

        return synthesis.synthesize(spec.seed, spec.index, self._log_n(spec.params),
                                    field=self.field, backend=self.kernel)  # fmt: skip

    def prove(self, buffers: Any, worker: int, keep_output: bool = True) -> Proof:
        import gpu.reference.ntt as ntt
        from gpu.reference.digest import digest

        a, b, c = buffers
        phases: dict[str, float] = {}
        steps = ntt.HSteps(len(a).bit_length() - 1, self.field)

        def timed(phase: str, step: Callable[..., Any], *args: Any) -> Any:
            started = time.perf_counter()
            out = step(*args)
            phases[phase] = time.perf_counter() - started
            return out

        evals = timed("coset_ntt", steps.coset_ntt, *timed("intt", steps.intt, a, b, c))
        h = timed("coset_intt", steps.coset_intt, timed("pointwise", steps.pointwise, *evals))
        return Proof(digest(h, field=self.field), phases, h if keep_output else None)

    def verify(self, spec: PartitionSpec, buffers: Any, proof: Proof) -> bool:
        a, b, c = buffers
        return self._verified(a, b, c, proof)

    def _verified(self, a: Any, b: Any, c: Any, proof: Proof) -> bool:
        from gpu.reference.digest import digest
        from gpu.reference.verification import verify

        field = self.field
        holds = bool(verify(a, b, c, proof.output, field=field, backend=self.kernel))
        return holds and digest(proof.output, field=field) == proof.digest


def cpu_backend_for(setting: str, field: str = "goldilocks") -> str:
    """The CPU backend the ntt workload synthesizes and verifies on, as
    ``PACER_NTT__CPU_BACKEND`` selects for ``field``: auto takes numba where it is installed.
    Logged, as their speed depends on it: falling back to NumPy is a warning for Goldilocks,
    whose products NumPy makes at less than half the compiled rate."""
    if setting != "auto":
        try:
            cpu_backend.check(setting)
        except (ValueError, RuntimeError) as exc:
            raise WorkloadError(f"PACER_NTT__CPU_BACKEND={setting}: {exc}") from None
        if setting == "numba":
            logger.info(
                "synthesis and verification compiled by Numba (PACER_NTT__CPU_BACKEND=numba)"
            )
        return setting
    if cpu_backend.numba_available():
        logger.info("synthesis and verification compiled by Numba (PACER_NTT__CPU_BACKEND=auto)")
        return "numba"
    logger.log(
        logging.WARNING if field == "goldilocks" else logging.INFO,
        "Numba is not installed: %s synthesis and verification run as NumPy calls%s (pip "
        "install 'pacer[fast]', or PACER_NTT__CPU_BACKEND=numpy to say so)",
        field, ", at less than half the compiled rate" if field == "goldilocks" else "",
    )  # fmt: skip
    return "numpy"
