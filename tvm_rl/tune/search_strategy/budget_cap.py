"""Cut the last batch of a whole-model budget to what is left of it.

MetaSchedule's task scheduler checks its global trial budget only between batches, so the batch that crosses it
is measured whole: 121 of 128 spent and a batch of 8 made 129. `BudgetCap` wraps each task's strategy with one
counter shared by all tasks (clones share it) and hands on at most what is left. It sits outside
`StopWhenExhausted`, which sees the full batch, so a cut batch never marks a task's space as run out.
"""
from __future__ import annotations

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.database import Database
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy, SearchStrategy


@derived_object
class BudgetCap(PySearchStrategy):
    """Delegates to `inner`; passes on at most `left[0]` candidates, and counts every measured one off it."""

    def __init__(self, inner: SearchStrategy, left: list[int]) -> None:
        self.inner, self.left = inner, left  # `left` is shared by every task's clone: the run's budget

    def _initialize_with_tune_context(self, context) -> None:
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database: Database | None = None,
                   cost_model=None) -> None:
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self):
        candidates = self.inner.generate_measure_candidates()
        if candidates is None:
            return None
        return list(candidates)[: max(0, self.left[0])]

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.left[0] -= len(results)
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self) -> "BudgetCap":
        return BudgetCap(self.inner.clone(), self.left)
