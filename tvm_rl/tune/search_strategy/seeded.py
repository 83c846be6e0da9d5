"""Measure a schedule library's schedules for a task first, then search as usual.

`Seeded` wraps any strategy. Up to `share` of a task's first batch is the library's schedules for its kernel
(`ScheduleLibrary.seeds`: the same workload measured elsewhere, and the same kind of kernel at other shapes with its
tile splits re-chosen), postprocessed as the task's own candidates are and the best of them by the run's cost model;
the rest is the inner strategy's own first batch. Seeds only, on a whole-model budget that gives most kernels one
batch, was measured worse than the search on a model whose kernels the library had not seen (MobileNet-V2 from
ResNet-18's schedules: docs/results/tuner_library.md), so the search keeps its share. Measured, the seeds are in
the database, where evolutionary search starts its next population from. `tune_workloads` puts it inside
`SkipMeasured`, so a resumed run does not measure them again.
"""
from __future__ import annotations

from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

from ...interrupt import interrupt_pending
from ..knobs import to_candidate
from ..library import ScheduleLibrary


@derived_object
class Seeded(PySearchStrategy):
    """Delegates to `inner`, whose first batch gives up to `share` of its places (at least one) to the best of up
    to `limit` library schedules for the task (fewer if fewer replay or pass the postprocessors); `seeded` counts,
    across clones, how many schedules were handed out."""

    def __init__(self, inner: ms.SearchStrategy, library: ScheduleLibrary, limit: int = 16, share: float = 0.5,
                 seeded: list[int] | None = None) -> None:
        self.inner, self.library, self.limit, self.share = inner, library, limit, share
        self.seeded = seeded if seeded is not None else [0]
        self.context: Any = None

    def _initialize_with_tune_context(self, context: ms.TuneContext) -> None:
        self.context = context
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None) -> None:
        self.per_iter, self.cost_model, self.first = int(num_trials_per_iter), cost_model, True
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self):
        if not self.first:
            return self.inner.generate_measure_candidates()
        self.first = False
        seeds = self._ranked_seeds()[: max(1, int(self.per_iter * self.share))]
        self.seeded[0] += len(seeds)
        more = self.inner.generate_measure_candidates()
        if more is None and not seeds:
            return None
        return seeds + list(more or [])[: self.per_iter - len(seeds)]

    def _ranked_seeds(self) -> list[ms.MeasureCandidate]:
        """The library's schedules for this task, postprocessed, best first by the cost model."""
        if self.context is None:
            return []
        postprocs = list(self.context.space_generator.postprocs or [])
        candidates = []
        for sch in self.library.seeds(self.context.mod, self.limit):
            sch.enter_postproc()
            try:
                if all(proc.apply(sch) for proc in postprocs):
                    candidates.append(to_candidate(sch))
            except Exception:  # a postprocessor refusing the replayed schedule: not a candidate
                if interrupt_pending():
                    raise
        if len(candidates) > 1 and self.cost_model is not None:
            scores = [float(s) for s in self.cost_model.predict(self.context, candidates)]
            order = sorted(range(len(candidates)), key=lambda i: -scores[i])
            candidates = [candidates[i] for i in order]
        return candidates

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self) -> Seeded:
        return Seeded(self.inner.clone(), self.library, self.limit, self.share, self.seeded)


__all__ = ["Seeded"]
