"""How a whole-model budget of measurements (and minutes) is spread over a model's kernels.

`LatencyShare` is a MetaSchedule task scheduler: each batch goes to the kernel where one more batch is expected to
save the most end-to-end time. That is MetaSchedule's gradient rule: a kernel's calls per model run x
(alpha x its recent improvement per batch + (1 - alpha) x its best latency / its batches so far), with three
changes a budget needs:

- A kernel not measured yet is ranked by an estimate of what it costs untuned (TVM builds an untuned CPU kernel
  as naive loops: its FLOPs and bytes at naive rates) instead of every kernel getting a first batch in order:
  the kernels whose untuned code is slowest come first, and with a budget smaller than a batch per kernel the
  cheapest ones keep their default schedules.
- Every batch is in the database before the next one is chosen (MetaSchedule's rule commits none until every
  kernel has had its first), so an interrupted run loses at most one batch and resumes from what was measured:
  a kernel's earlier records count as its history.
- It stops choosing at a deadline (`tvm-rl optimize --minutes`).

Given a `batch_gain.GainModel`, a kernel measured at least once is ranked instead by its calls x its best latency
x the gain the model expects of its next batch (the learned allocator; not the default).
"""
from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
from tvm.s_tir.meta_schedule.task_scheduler import PyTaskScheduler

from ..database import record_seconds
from .batch_gain import GainModel, features

# Rough rates of the naive loops TVM builds for an untuned CPU kernel (one thread, scalar): ResNet-18's untuned
# build runs its 1.8 GFLOP in about 3 s on a 2-core Xeon. They rank kernels nobody has measured yet, against the
# time a batch is expected to save on the measured ones.
NAIVE_FLOPS = 1e9
NAIVE_BYTES = 2e9


def untuned_seconds(mod: tvm.IRModule) -> float:
    """A rough latency of a kernel built untuned: the slower of its FLOPs at NAIVE_FLOPS and its buffers (what it
    reads and writes) at NAIVE_BYTES."""
    from tvm.s_tir.analysis import estimate_tir_flops
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    try:
        flops = float(estimate_tir_flops(mod))
    except Exception:  # noqa: BLE001  (an op TVM cannot count: rank it by its bytes alone)
        flops = 0.0
    nbytes = 0
    for func in mod.functions.values():
        for info in ArgInfo.from_prim_func(func):
            size = math.prod(int(d) if isinstance(d, (int, tvm.tirx.IntImm)) else 1 for d in info.shape)
            nbytes += size * tvm.runtime.DataType(str(info.dtype)).bits // 8
    return max(flops / NAIVE_FLOPS, nbytes / NAIVE_BYTES, 1e-9)


@derived_object
class LatencyShare(PyTaskScheduler):
    """MetaSchedule's gradient task scheduler, budget-aware (see the module docstring).

    `estimates[i]` is task i's latency untuned (`untuned_seconds`); `prior[i]` its best latency in seconds and its
    batches so far from an earlier run (None, 0 when new). `observer` (give it to the tuning call's measure
    callbacks) reports each batch back to the scheduler. `gain_model` replaces the rule for measured tasks.
    """

    def __init__(self, estimates: Sequence[float], prior: Sequence[tuple[float | None, int]] | None = None,
                 alpha: float = 0.2, window: int = 3, deadline: float | None = None, seed: int = 0,
                 gain_model: GainModel | None = None) -> None:
        super().__init__()
        self.alpha, self.window, self.deadline = alpha, window, deadline
        self.gain_model = gain_model
        self.estimates = list(estimates)
        prior = prior or [(None, 0)] * len(self.estimates)
        # best latency so far after each batch (seconds); a resumed task's earlier batches all count at its best
        self.history: list[list[float]] = [[best] * max(1, rounds) if best is not None else []
                                           for best, rounds in prior]
        self.rng = random.Random(seed)
        self.last: int | None = None
        self.exhausted: set[int] = set()  # tasks whose strategy ended before the budget or the deadline did
        self.observer = _Observer(self)

    def next_task_id(self) -> int:
        outer = self._outer()
        tasks = outer.tasks_
        if self.last is not None and tasks[self.last].runner_futures is not None:
            outer.join_running_task(self.last)  # commit the last batch before choosing (and so rank on it)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return -1
        alive = []
        for i, task in enumerate(tasks):
            outer.touch_task(i)
            if task.is_terminated:
                self.exhausted.add(i)
            else:
                alive.append(i)
        if not alive:
            return -1
        self.last = self.choose(alive, [float(tasks[i].task_weight) for i in alive])
        return self.last

    def choose(self, alive: Sequence[int], weights: Sequence[float]) -> int:
        """The task of `alive` (with these calls per model run) whose next batch should save the most time."""
        scores = [self._score(i, w) for i, w in zip(alive, weights)]
        if self.gain_model is not None:
            measured = [(j, [b for b in self.history[i] if not math.isinf(b)]) for j, i in enumerate(alive)]
            measured = [(j, bests) for j, bests in measured if bests]
            if measured:
                gains = self.gain_model.predict([features(bests, self.estimates[alive[j]]) for j, bests in measured])
                for (j, bests), gain in zip(measured, gains):
                    scores[j] = weights[j] * bests[-1] * float(gain)
        top = max(scores)
        return self.rng.choice(list(alive)) if top == min(scores) else alive[scores.index(top)]

    def _score(self, i: int, weight: float) -> float:
        history = self.history[i]
        measured = [b for b in history if not math.isinf(b)]
        if not measured:
            # Never measured (or every candidate failed so far): a first good schedule saves about what the kernel
            # costs untuned; each failed batch lowers that hope.
            return weight * self.estimates[i] / (1 + len(history))
        n, best = len(history), history[-1]
        earlier = history[-1 - self.window] if n > self.window else math.inf
        recent = 0.0 if math.isinf(earlier) else (earlier - best) / self.window
        return weight * (self.alpha * recent + (1 - self.alpha) * best / n)

    @property
    def best(self) -> list[float]:
        """Each task's best latency so far in seconds (inf before a valid measurement)."""
        return [history[-1] if history else math.inf for history in self.history]

    def observe(self, task_id: int, runner_results) -> None:
        """Append the task's best latency after this batch of results to its history."""
        history = self.history[task_id]
        best = history[-1] if history else math.inf
        for result in runner_results:
            if result.error_msg is None and result.run_secs:
                best = min(best, record_seconds(result.run_secs) or math.inf)
        history.append(best)


@derived_object
class _Observer(PyMeasureCallback):
    """Hands each measured batch to its LatencyShare."""

    def __init__(self, scheduler: LatencyShare) -> None:
        self.scheduler = scheduler

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        self.scheduler.observe(task_id, runner_results)
