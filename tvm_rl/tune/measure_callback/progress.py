"""A measure callback that prints one line per measured batch: task, trials so far, best latency so far."""
from __future__ import annotations

import math
import time

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from ...database import record_seconds


@derived_object
class ProgressLine(PyMeasureCallback):
    """Prints `[model] task (i/n) trials t: best x us (batch: k ok, f failed)` after every batch; with a
    whole-model budget (`total` measurements, `already` of them spent before this run) also how much is spent."""

    def __init__(self, prefix: str = "", task_names: list[str] | None = None, total: int | None = None,
                 already: int = 0) -> None:
        self.prefix, self.names = prefix, task_names or []
        self.total, self.spent = total, already
        self.best: dict[int, float] = {}
        self.trials: dict[int, int] = {}
        self.start = time.perf_counter()

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        seconds = [record_seconds(r.run_secs) if r.error_msg is None else None for r in runner_results]
        ok = [s for s in seconds if s is not None]
        failed = len(runner_results) - len(ok)
        self.trials[task_id] = self.trials.get(task_id, 0) + len(runner_results)
        self.spent += len(runner_results)
        if ok:
            self.best[task_id] = min(self.best.get(task_id, math.inf), min(float(s) for s in ok))
        name = self.names[task_id] if task_id < len(self.names) else f"task {task_id}"
        best = self.best.get(task_id)
        best_text = f"best {best * 1e6:.1f} us" if best is not None else "no valid candidate yet"
        print(f"{self.prefix}{name} ({task_id + 1}/{max(len(self.names), task_id + 1)}): "
              f"{self.trials[task_id]} trials, {best_text} (batch: {len(ok)} ok, {failed} failed) "
              f"[{time.perf_counter() - self.start:.0f} s"
              + (f", {self.spent}/{self.total} of the budget" if self.total is not None else "") + "]", flush=True)
