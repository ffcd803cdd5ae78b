"""The ntt workload proved on CUDA GPUs from a pinned host-memory pool (`GpuNttWorkload`):
the pool pinned or adopted, the provers and the synthesis processes started beside it."""

from __future__ import annotations

import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from gpu.reference import cpu_backend
from gpu.shm.blocks import SHM_DIR
from gpu.workload.cpu import NttWorkload
from pacer.workload import PartitionSpec, Proof

if TYPE_CHECKING:
    from gpu.cuda.prover import GpuProver
    from gpu.pool.pinned import PinnedPool
    from gpu.pool.slots import Slot
    from gpu.procs.executor import ProcessSynthesizer

logger = logging.getLogger("gpu.workload")
T = TypeVar("T")


class GpuNttWorkload(NttWorkload):
    """The same H computation proved on CUDA GPUs, from a pinned host-memory pool: a
    `pacer.workload.PooledWorkload`.

    Synthesis writes each partition into a pinned pool slot (the field's storage dtype, so the
    GPU copies it at full speed and nothing is allocated on the hot path); proving worker ``w``
    runs on device ``devices[w // workers_per_device]`` with a stream of its own; the slot goes
    back to the pool once the partition is done. ``prepare`` allocates the pool and sets up
    every worker's device buffers, tables and kernels (and, with ``executor="processes"``, the
    synthesis processes) before the service is ready; ``close`` stops those and frees the pool.
    A proof carries H's digest, folded on the GPU; H itself comes back only for partitions
    that will be verified (every ``verify_every``-th by default: a CPU check of 2^27 elements
    costs seconds of a core). A shared pool's blocks and owner records live in ``shm_dir``, a
    tmpfs directory.
    """

    DEFAULT_LOG_N = 27
    """Seven transforms of 2^27 points a partition: 3 GiB of Goldilocks a, b, c to copy in
    (its time on an H200: bench/RESULTS.md)."""
    DEFAULT_FIELD = "goldilocks"
    """On GPUs: the field whose partitions take at least 100 ms of an H200, at a synthesis
    cost compiled by Numba about BabyBear's as NumPy calls (bench/RESULTS.md)."""
    verify_every = 100
    populate_pool: bool | None = None  # a shared pool's pages before ready (None: if pinned)

    def __init__(
        self,
        log_n: int,
        devices: list[int],
        workers_per_device: int,
        on_empty: Literal["wait", "fallback"],
        executor: Literal["threads", "processes"] = "threads",
        pool_backend: Literal["cuda", "shared", "shared-cuda"] | None = None,
        field: str | None = None,
        backend: str = "numpy",
        keep_pool: bool = False,
        shm_dir: str = SHM_DIR,
    ) -> None:
        # The compiled kernels load in `prepare`, once the pool is pinned, not here.
        super().__init__(log_n, field, backend, warm=False)
        self.devices = devices
        self.workers_per_device = workers_per_device
        self.on_empty = on_empty
        self.executor = executor
        # Processes need slots they can map, and a pool kept for the next pacer must be in
        # blocks it can map: shared memory, pinned by cudaHostRegister.
        self.pool_backend: Literal["cuda", "shared", "shared-cuda"] = pool_backend or (
            "shared-cuda" if executor == "processes" or keep_pool else "cuda"
        )
        self.keep_on_close = keep_pool
        self.shm_dir = shm_dir
        self.pool: PinnedPool | None = None
        self._provers: dict[int, Any] = {}
        self._synthesizer: ProcessSynthesizer | None = None
        # Syntheses abandoned before their fill took a token, by the spec the call was given
        # (id → spec; an entry goes with its spec, so no id is another spec's meanwhile).
        self._abandoned_early: dict[int, weakref.ReferenceType[PartitionSpec]] = {}
        self._abandoning = threading.Lock()
        self._phases_s: dict[str, float] = {}
        self._kernels_loaded: Future[None] | None = None

    @property
    def workers(self) -> int:
        return len(self.devices) * self.workers_per_device

    def device_of(self, worker: int) -> int:
        return self.devices[worker // self.workers_per_device]

    @functools.cached_property
    def gpu_model(self) -> str:
        """Its devices' model(s), asked of the driver once: the service reads it at every
        resolve, and a check of the Workload contract reads every member."""
        from gpu.cuda.devices import device_name

        return ", ".join(sorted({device_name(d) for d in self.devices}))

    @property
    def synthesis_restarts(self) -> int:
        return 0 if self._synthesizer is None else int(self._synthesizer.restarts)

    @property
    def prepare_phases_s(self) -> dict[str, float]:
        """How long each part of `prepare` took (s): the pool, the provers, the synthesis
        processes and their mapping of the pool; the parts overlap."""
        return dict(self._phases_s)

    def keep_pool(self) -> None:
        """At `close`, leave the pool's blocks for the next pacer (`gpu.shm.handover`)."""
        self.keep_on_close = True

    def adoptable_bytes(self) -> int:
        """Bytes of the first pool a previous pacer kept in ``shm_dir`` laid out as this one's
        would be (what `prepare` adopts); 0 without one, or with the cuda backend."""
        if self.pool_backend == "cuda":
            return 0
        from gpu.pool.slots import pool_layout
        from gpu.shm.record import adoptable_bytes

        layout = pool_layout(((1 << self.log_n,),) * 3, self.field.storage)
        return adoptable_bytes(layout, self.shm_dir)

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        out = super().check_params(params)
        if out.get("log_n", self.log_n) != self.log_n:
            raise ValueError(
                f"params.log_n: must equal PACER_NTT__LOG_N ({self.log_n}) when proving on the "
                "GPU, whose pinned pool holds partitions of that size"
            )
        return out

    def partition_bytes(self, params: Mapping[str, Any]) -> int:
        return 3 * self.field.storage.itemsize * (1 << self.log_n)  # a, b, c as stored

    def prepare(self, slots: int, budget_bytes: int, synthesis_workers: int) -> None:
        """Allocate the pinned pool before readiness, or adopt the one the previous pacer kept;
        meanwhile, on threads, build every worker's prover (CUDA context, kernels, tables and
        buffers on the device) and, with processes, start ``synthesis_workers`` synthesis
        processes, each of which maps a pool block when it first writes into it
        (`gpu.procs.worker_blocks`: none beside the pinning). This process's compiled CPU kernels
        load once the pool is pinned, on a thread of their own, not waited for: only a
        verification, or a synthesis here, needs them, and waits (`_compiled`). Beside the
        pinning, the kernels slowed it by a third and the workers' mapping by a sixth on an
        H200 host (bench/RESULTS.md). Each part's time: `prepare_phases_s`."""
        on_cuda = self.pool_backend.endswith("cuda")  # else provers come from elsewhere (tests)
        try:
            with ThreadPoolExecutor(2, thread_name_prefix="prepare") as starter:
                provers = on_cuda and starter.submit(self._timed, "provers", self._build_provers)
                starting = None
                if self.executor == "processes":
                    from gpu.procs.executor import ProcessSynthesizer

                    self._synthesizer = ProcessSynthesizer(
                        synthesis_workers, backend=self.kernel, field=self.field
                    )
                    starting = starter.submit(self._timed, "synthesis_processes",
                                              self._synthesizer.start)  # fmt: skip
                self.pool = self._timed("pool", self._build_pool, slots, budget_bytes)
                if self.kernel == "numba" and self._kernels_loaded is None:
                    self._kernels_loaded = self._load_kernels()  # not beside the pinning
                if starting is not None:
                    starting.result()
                if provers:
                    provers.result()
        except BaseException:
            if self._synthesizer is not None:
                self._synthesizer.close()
                self._synthesizer = None
            raise

    def _load_kernels(self) -> Future[None]:
        """This process's compiled kernels (verification's, and synthesis's here) loading on
        a thread: seconds of mostly Python, which made them the last part of a restart's
        `prepare` when waited for, and slowed the pinning when loaded beside it."""
        warm = functools.partial(cpu_backend.warm, self.field, verification=True)

        def load() -> None:
            try:
                self._timed("kernels", warm)
            except BaseException:  # said now, not first at a verification's failure
                logger.exception(
                    "this process's compiled CPU kernels failed to load: each verification, "
                    "and each synthesis here, fails with this"
                )
                raise
            logger.info("this process's compiled CPU kernels (verification) loaded in %.1f s",
                        self._phases_s["kernels"])  # fmt: skip

        loader = ThreadPoolExecutor(1, thread_name_prefix="kernels")
        try:
            return loader.submit(load)
        finally:
            loader.shutdown(wait=False)

    def _compiled(self) -> None:
        """Wait until this process's compiled kernels are loaded, where they are loading."""
        if self._kernels_loaded is not None:
            self._kernels_loaded.result()

    def _timed(self, phase: str, call: Callable[..., T], *args: Any) -> T:
        started = time.perf_counter()
        try:
            return call(*args)
        finally:
            self._phases_s[phase] = time.perf_counter() - started

    def _build_pool(self, slots: int, budget: int) -> PinnedPool:
        from gpu.pool.allocators import pool_allocator
        from gpu.pool.pinned import PinnedPool
        from gpu.shm.blocks import NoRoomError

        n = 1 << self.log_n
        allocator = pool_allocator(self.pool_backend, self.keep_on_close, slots,
                                   populate=self.populate_pool, shm_dir=self.shm_dir)  # fmt: skip
        try:
            return PinnedPool.build(slots, [(n,)] * 3, dtype=self.field.storage,
                                    backend=allocator, on_empty=self.on_empty,
                                    budget_bytes=budget, field=self.field.name)  # fmt: skip
        except NoRoomError as error:
            raise RuntimeError(
                f"{error} (PACER_GPU__POOL_SLOTS, PACER_GPU__SHM_DIR), or synthesize on threads "
                "(PACER_SYNTHESIS__EXECUTOR=threads: pinned without shared memory, synthesis "
                "slower)"
            ) from error

    def _build_provers(self) -> None:
        from gpu.cuda.prover import build_provers

        devices = [self.device_of(worker) for worker in range(self.workers)]
        self._provers.update(build_provers(devices, self.log_n, self.field))

    def synthesize(self, spec: PartitionSpec) -> Slot:
        import gpu.reference.synthesis as synthesis

        if self.pool is None:
            raise RuntimeError("the pinned pool is not allocated yet: call prepare first")
        slot = self.pool.checkout()
        block = self.pool.slot_block(slot) if self._synthesizer is not None else None
        try:
            if block is not None and self._synthesizer is not None:
                self._fill(self._synthesizer, spec, block)
            else:  # on this thread (also a pageable fallback slot, which no process can map)
                self._compiled()
                synthesis.synthesize_into(spec.seed, spec.index, slot.arrays,
                                          step=synthesis.THREADED_STEP, field=self.field,
                                          backend=self.kernel)  # fmt: skip
        except BaseException:
            slot.release()
            raise
        return slot

    def _fill(self, synthesizer: ProcessSynthesizer, spec: PartitionSpec, block: Any) -> None:
        """In a worker process, straight into the shared slot, under a token named so that
        `abandoned` finds it; a synthesis abandoned before it took one is cancelled at once
        (`SynthesisCancelled`, nothing begun)."""
        with self._abandoning:
            token = synthesizer.token(_named(spec))
            early = self._abandoned_early.pop(id(spec), None)
            if early is not None and early() is spec:
                synthesizer.cancel(token)
        synthesizer.fill(block, spec.seed, spec.index, self.field, token)

    def abandoned(self, spec: PartitionSpec, call: str) -> None:
        """A synthesis abandoned in a worker process is cancelled (`ProcessSynthesizer.cancel`),
        whenever it was abandoned: its worker is killed where one runs it, so the set of
        processes and the slot come back, and none begins it where none has. One whose fill
        has not taken a token yet (`_fill`) is cancelled when it does: known by the very spec
        the pipeline gave the call, so a retry of the partition (another spec) is not. Nothing
        for the others: a prove on the GPU, a verification on a thread here, cannot be
        stopped."""
        if call != "synthesize" or self._synthesizer is None:
            return
        with self._abandoning:
            # A token of the partition neither done nor cancelled is this call's: the pipeline
            # retries a partition once this returns, and each synthesis of it abandoned before
            # was cancelled (where it had no token, when it took one, under this lock).
            token = self._synthesizer.token_of(_named(spec))
            if token is not None:
                self._synthesizer.cancel(token)
                return
            key = id(spec)
            self._abandoned_early[key] = weakref.ref(
                spec, lambda _: self._abandoned_early.pop(key, None)
            )

    def prove(self, buffers: Slot, worker: int, keep_output: bool = True) -> Proof:
        prover: GpuProver | None = self._provers.get(worker)
        if prover is None:  # without prepare (tests): created on the worker's own thread
            from gpu.cuda.prover import GpuProver

            prover = GpuProver(self.device_of(worker), self.log_n, self.field)
            self._provers[worker] = prover
        result = prover.prove(*buffers.arrays, keep_h=keep_output)
        return Proof(result.digest, result.phases_s, result.h)

    def verify(self, spec: PartitionSpec, buffers: Slot, proof: Proof) -> bool:
        import numpy as np

        if proof.output is None:
            raise ValueError("the proof carries no H: prove with keep_output=True to verify it")
        self._compiled()
        # Goldilocks slots are uint64 already: read in place, not copied (3 GiB at 2^27).
        a, b, c = (array.astype(np.uint64, copy=False) for array in buffers.arrays)
        return self._verified(a, b, c, proof)

    def release(self, buffers: Slot) -> None:
        """The partition is done: its pinned slot goes back to the pool."""
        if not buffers.released:
            buffers.release()

    def close(self) -> None:
        if self._synthesizer is not None:
            self._synthesizer.close()
        if self.pool is not None:
            self.pool.close(keep=self.keep_on_close)


def _named(spec: PartitionSpec) -> str:
    """How a partition's fill is named to the synthesis processes (and in their log)."""
    return f"{spec.index} of job {spec.job_id}"
