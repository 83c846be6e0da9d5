"""Builders and runners that keep their worker processes alive across measurement batches.

MetaSchedule's LocalBuilder starts a fresh process pool for every batch, and each new worker imports
`tvm.s_tir.tensor_intrin` (up to a minute on a small or busy CPU) inside the build's 30 s timeout, so on a
slow machine every candidate times out. Keeping one pool whose initializer pays that import once, untimed, makes
builds cost only the compile itself.
"""
from __future__ import annotations

import os

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.builder.local_builder import _serialize_params, _worker_func
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind


def _warm_worker() -> None:
    from tvm_rl.tune.intrin import preload_tensor_intrinsics

    preload_tensor_intrinsics()  # registers the tensorize intrinsics schedules may name


@derived_object
class PersistentBuilder(PyBuilder):
    """Builds candidates like MetaSchedule's LocalBuilder, in a worker pool (heavy imports done) that lives as
    long as the builder."""

    def __init__(self, max_workers: int | None = None, timeout_sec: float = 60.0) -> None:
        super().__init__()
        self.max_workers = max_workers or os.cpu_count() or 1
        self.timeout_sec = timeout_sec
        self.f_build = self.f_export = None  # MetaSchedule's defaults
        self._pool: PopenPoolExecutor | None = None

    def _executor(self) -> PopenPoolExecutor:
        if self._pool is None:
            self._pool = PopenPoolExecutor(max_workers=self.max_workers, timeout=self.timeout_sec,
                                           initializer=_warm_worker)
        return self._pool

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        jobs = [(self.f_build, self.f_export, b.mod, b.target, _serialize_params(b.params)) for b in build_inputs]
        results = []
        for res in self._executor().map_with_error_catching(lambda x: _worker_func(*x), jobs):
            if res.status == StatusKind.COMPLETE:
                results.append(BuilderResult(res.value, None))
            elif res.status == StatusKind.TIMEOUT:
                results.append(BuilderResult(None, f"PersistentBuilder: timeout, killed after {self.timeout_sec} s"))
            else:
                results.append(BuilderResult(None, f"PersistentBuilder: an exception occurred\n{res.value}"))
        return results
