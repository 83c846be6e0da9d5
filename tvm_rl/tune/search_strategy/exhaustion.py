"""Stop a task once its search strategy keeps proposing nothing new.

MetaSchedule's task scheduler ends a task only when its strategy returns None (trial budget reached). For
kernels with a tiny design space (element-wise ops, small reductions) evolutionary search finds no unmeasured
candidate long before that, returns an empty batch, and the scheduler picks the task again and again, each
pick spending a full search (seconds to tens of seconds on a small CPU) for nothing. Evolutionary search
proposes fewer candidates than asked only when it cannot find more distinct unmeasured ones, so this wrapper
ends the task after such a short batch (or an empty one) instead of searching again; what was measured stays
in the database. The knob-space strategies (`PPOSearch`, `SimulatedAnnealing`) end spent tasks themselves (they return
None once no valid unmeasured point is left, and may propose a short batch on purpose: `search_strategy.ppo`), so
they are wrapped with `end_when_short=False`, for the error guard below alone.

A search that raises (TVM's evolutionary search can fail inside its parallel mutation and rating, e.g. on an int32
overflow of a mutated trace) ends its task the same way, with one line naming the task and the error, instead of
ending every other task's tuning; the message is kept in `errors` (task name: message), a dict the clones share,
for the run's report.
"""
from __future__ import annotations

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.database import Database
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy, SearchStrategy

from ...interrupt import deferred, interrupt_pending
from .skip_measured import SkipMeasured


@derived_object
class StopWhenExhausted(PySearchStrategy):
    """Delegates to `inner` (any SearchStrategy); returns None once its search failed, or (if `end_when_short`) once
    a batch came back short or empty."""

    def __init__(self, inner: SearchStrategy, errors: dict[str, str] | None = None,
                 end_when_short: bool = True, short_by_drops: list[bool] | None = None) -> None:
        self.inner, self.per_iter, self.exhausted, self.end_when_short = inner, 0, False, end_when_short
        self.short_by_drops = short_by_drops  # `SkipMeasured`'s shared flag, when it is the inner strategy
        self.task, self.errors = "", errors if errors is not None else {}

    def _initialize_with_tune_context(self, context) -> None:
        self.task = str(context.task_name or "")
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database: Database | None = None,
                   cost_model=None) -> None:
        self.per_iter, self.exhausted = num_trials_per_iter, False
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self):
        if self.exhausted:
            return None
        # Ctrl-C during evolutionary search's parallel rating would terminate the process: it waits for the round.
        try:
            with deferred():
                candidates = self.inner.generate_measure_candidates()
        except Exception as err:  # noqa: BLE001 - one kernel's failed search must not end the other kernels' tuning
            if interrupt_pending():  # Ctrl-C that TVM passed on as another error: still a stop
                raise
            lines = [line for line in str(err).splitlines() if line.strip()]
            error = f"{type(err).__name__}: {lines[-1].strip() if lines else ''}"
            self.errors[self.task] = error
            self.exhausted = True
            print(f"  {self.task or 'a task'}: its search failed ({error}); the task ends with what it measured, "
                  "the other kernels go on", flush=True)
            return None
        if not self.end_when_short:
            return candidates
        if candidates is None or len(candidates) == 0:
            return None
        # A full batch that `SkipMeasured` cut short by dropping known schedules is not a space run out.
        self.exhausted = len(candidates) < self.per_iter and not (self.short_by_drops and self.short_by_drops[0])
        return candidates

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self) -> "StopWhenExhausted":
        return StopWhenExhausted(self.inner.clone(), self.errors, self.end_when_short, self.short_by_drops)


def skip_measured_until_exhausted(inner: SearchStrategy, errors: dict[str, str] | None = None,
                                  skipped: list[int] | None = None) -> StopWhenExhausted:
    """`StopWhenExhausted(SkipMeasured(inner))`, the two sharing SkipMeasured's short-batch flag (a full batch cut
    short by dropped schedules does not end the task): how evolutionary search is wrapped to tune."""
    cut_short = [False]
    return StopWhenExhausted(SkipMeasured(inner, skipped=skipped, short_by_drops=cut_short), errors,
                             short_by_drops=cut_short)
