"""Drop proposed candidates whose schedule the database already holds.

MetaSchedule's EvolutionarySearch seeds its population with the database's best records but does not count them
as measured (a TODO in TVM), and ReplayTrace draws with replacement, so a resumed run, or a run started from
someone's records, may measure a schedule again: a trial spent for nothing. `tune_workloads` wraps evolutionary
search in `SkipMeasured` (and `StopWhenExhausted`); the tuner benchmark wraps every MetaSchedule strategy in it.
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

from ..knob_trace import plain_literal


@derived_object
class SkipMeasured(PySearchStrategy):
    """Drops candidates whose schedule the database already holds, asking `inner` again (up to `tries` times)
    to fill the batch. MetaSchedule's EvolutionarySearch seeds its population with the database's best records
    but does not count them as measured (a TODO in TVM), and ReplayTrace draws with replacement, so either may
    propose a schedule of the shared first batch again; such a trial would be spent for nothing. (In a check on
    one task, three seeds' first evolutionary batches held none: the count is kept in `skipped`.)

    A try that drops a database record not dropped before does not count against `tries`. A resumed task's
    database holds tens of records its new search state has never proposed, and a search whose model rates them
    highest (as one trained on them does) proposes them first: with a fixed number of tries the batch came back
    short, and `StopWhenExhausted` ended the task as if its space had run out (ResNet-18, 64 trials per kernel:
    8 kernels ended at 48 to 61 records). Each record can be drained once, so the tries stay bounded.

    Only a batch with nothing left is asked for again: a full batch cut short by drops goes out short, and
    `short_by_drops` (a one-element list shared with `StopWhenExhausted`) says so, so that the task does not end.
    Searching again for the last slots cost a full round for one or two candidates, and a library's exact matches
    and seeds made such rounds common in fresh runs too."""

    def __init__(self, inner: ms.SearchStrategy, tries: int = 3, skipped: list[int] | None = None,
                 short_by_drops: list[bool] | None = None) -> None:
        self.inner, self.tries = inner, tries
        self.skipped = skipped if skipped is not None else [0]  # shared by clones: the run's count
        # Whether the last batch any clone made is a full one cut short by dropped schedules: shared
        # with `StopWhenExhausted`, which reads it right after the call (the task scheduler asks one task at a time;
        # a clone made through TVM comes back without its Python attributes, so a flag on the object is not seen).
        self.short_by_drops = short_by_drops if short_by_drops is not None else [False]

    def _initialize_with_tune_context(self, context: ms.TuneContext) -> None:
        self.context = context
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None) -> None:
        self.max_trials, self.per_iter, self.done = int(max_trials), int(num_trials_per_iter), 0
        self.seen: set[int] = set()  # the schedules' modules, by structural hash
        # And their traces, by `trace_key`: a record read back from a JSON database does not give the module its
        # schedule gave when the schedule has a boolean annotation (layout_rewrite_preproc=True comes back as the
        # integer 1), so for such schedules the module hashes of the database's records missed the candidates'.
        self.seen_traces: set[int] = set()
        self.recorded: set[int] = set()  # trace keys of the database's records not yet dropped
        # Only this task's records: a model's database holds every kernel's, and replaying them all per task
        # would cost seconds to minutes.
        mod = getattr(getattr(self, "context", None), "mod", None)
        if database is not None and mod is not None and database.has_workload(mod):
            for record in database.get_top_k(database.commit_workload(mod), 1 << 30):
                self.seen.add(_schedule_hash(record.workload.mod, record.trace))
                self.recorded.add(trace_key(record.trace))
        self.seen_traces |= self.recorded
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self):
        want = min(self.per_iter, self.max_trials - self.done)
        out: list = []
        batch = None
        tries = self.tries
        self.short_by_drops[0] = False
        while tries > 0:
            tries -= 1
            batch = self.inner.generate_measure_candidates()
            if batch is None:
                break
            dropped, drained = 0, False
            for candidate in batch:
                key, tkey = int(tvm_ffi.structural_hash(candidate.sch.mod)), trace_key(candidate.sch.trace)
                if key in self.seen or tkey in self.seen_traces:
                    dropped += 1
                    if tkey in self.recorded:
                        self.recorded.discard(tkey)
                        drained = True
                    continue
                self.seen.add(key)
                self.seen_traces.add(tkey)
                out.append(candidate)
            self.skipped[0] += dropped
            if len(out) >= want or not dropped:
                break
            if out and len(batch) >= want:
                # The inner search gave a full batch, cut short by dropped schedules (the database's: a library's
                # exact match, a resumed run's best, a seed `Seeded` handed out that the search proposes again): it
                # is not running dry, so the batch goes out short rather than buying its last slots with a second
                # full search (whose other picks evolutionary search would count as measured, never to propose them).
                self.short_by_drops[0] = True
                break
            tries += drained
        if not out and batch is None:
            return None
        return out[:want]

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.done += len(results)
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self) -> SkipMeasured:
        return SkipMeasured(self.inner.clone(), self.tries, self.skipped, self.short_by_drops)


def trace_key(trace) -> int:
    """A hash of `trace`'s instructions and decisions before postprocessing, with every literal as plain Python
    (True and 1 alike), so a trace and its copy read back from a JSON database get the same key."""
    return hash(plain_literal(trace.as_json(remove_postproc=True)))


def _schedule_hash(mod: tvm.IRModule, trace) -> int:
    sch = Schedule(mod)
    trace.apply_to_schedule(sch, remove_postproc=False)
    return int(tvm_ffi.structural_hash(sch.mod))


__all__ = ["SkipMeasured", "trace_key"]
