"""A measure callback that calls a function after every batch, once the batch's records are in the database."""
from __future__ import annotations

from collections.abc import Callable

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback


@derived_object
class AfterBatch(PyMeasureCallback):
    """Calls `fn()` after each measured batch. Put it after MetaSchedule's default callbacks, whose AddToDatabase
    has then appended the batch's records to the database files (a benchmark copies them away from there)."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        self.fn()
