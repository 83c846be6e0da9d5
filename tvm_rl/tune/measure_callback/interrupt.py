"""A measure callback that ends a tuning run whose Ctrl-C some callback swallowed (see `tvm_rl.interrupt`)."""
from __future__ import annotations

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from ...interrupt import interrupt_pending


@derived_object
class StopOnInterrupt(PyMeasureCallback):
    """Ends the run after a batch measured while Ctrl-C was pending (some callback swallowed the interrupt).
    Put it first among the measure callbacks: the same Ctrl-C killed the batch's workers, so its failures are
    the interrupt's, not the candidates', and must not reach the database as failed records."""

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        if interrupt_pending():
            raise KeyboardInterrupt
