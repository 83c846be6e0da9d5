"""TVM's Droplet Search as the last stage of a whole-model budget (the `budget-*-droplet` arms).

Droplet (TVM's `s_tir.meta_schedule.post_optimization`) walks the neighbourhood of a kernel's best schedule:
each knob of the best record's trace (tile sizes, parallel / vectorize / unroll annotations) moved to nearby
values, a batch at a time, until no neighbour is faster. TVM runs it per kernel after `tune_tasks` with
`post_optimization=True`, 100 trials a kernel on top of the budget, builds with MetaSchedule's LocalBuilder (whose
10 s timeout fails every candidate of a 2-core CPU) and appends to the database's files. Here its search
(`Droplet`, `Space.template`) is TVM's own; what changes is how a batch is measured:

- the neighbour's trace is replayed without its post-processing and the kernel's own post-processors are applied
  again (as MetaSchedule makes a candidate), so a moved annotation is lowered as the tuning would lower it;
- builds go to tvm-rl's PersistentBuilder and runs to MetaSchedule's LocalRunner with its defaults (as tuning
  measures), so the records compare with the tuning's;
- every measured candidate, failed or not, is committed to the run's database (failed ones at MetaSchedule's 1e10 s) and
  counts against the budget, which is spread over the kernels by their share of the model's time (weight x best).

A rerun resumes: the first stage is already spent and Droplet gets what is left, from each kernel's best.
"""
from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tvm
import tvm_ffi
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.post_optimization.droplet import Droplet
from tvm.s_tir.meta_schedule.post_optimization.space import Space
from tvm.s_tir.meta_schedule.utils import remove_build_dir

from tvm_rl.database import FAILED_SECONDS, record_seconds
from tvm_rl.tune.design_space import space_generator
from tvm_rl.tune.tasks import TuneReport, extract_tasks, records_per_workload, shared_builder

NOT_RUN = 10000.0  # what TVM's Droplet reads as a neighbour that was not measured


def _plain(obj):
    """A record's or workload's JSON form (TVM containers, lists and numbers) as plain Python, as TVM's Droplet
    reads it (TVM's own unpacker refuses Python lists, which TVM 0.27's FFI returns)."""
    if obj is None or isinstance(obj, (str, int, float)):
        return obj
    if isinstance(obj, (dict, tvm_ffi.Map)):
        return {_plain(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, tvm_ffi.Array)):
        return [_plain(v) for v in obj]
    return obj.value  # IntImm / FloatImm


def record_json(record: ms.database.TuningRecord) -> list:
    """The record's JSON form as TVM's Droplet reads it, its trace without post-processing (a layout rewrite's
    IndexMap has no JSON form in Python; Droplet drops those steps, and `_MeasuredSpace` applies them again)."""
    return [_plain(record.trace.as_json(remove_postproc=True)), [float(s) for s in record.run_secs],
            _plain(record.target.export()), [_plain(a.as_json()) for a in record.args_info]]


class _MeasuredSpace(Space):
    """TVM's Droplet space, measuring each batch as the tuning does and committing it to `database`."""

    def __init__(self, data, workload: ms.database.Workload, target: tvm.target.Target, database: ms.Database,
                 builder: ms.Builder, runner: ms.Runner):
        super().__init__(data, _plain(workload.as_json()), target)
        self.workload, self.database, self.builder, self.runner = workload, database, builder, runner
        context = ms.TuneContext(mod=workload.mod, target=target,
                                 space_generator=space_generator(target, guard=True, mod=workload.mod))
        self.postprocs = list(context.space_generator.postprocs)
        self.measured = 0

    def _schedule(self, cfg) -> Schedule | None:
        """The neighbour's schedule with the post-processors applied again; None if it does not apply."""
        try:
            record = ms.database.TuningRecord.from_json(json.loads(json.dumps(cfg)), self.workload)
            sch = Schedule(self.workload.mod)
            record.trace.apply_to_schedule(sch, remove_postproc=True)
            return sch if all(p.apply(sch) for p in self.postprocs) else None
        except Exception:  # noqa: BLE001 - a neighbour whose tiles do not divide the loops is not a schedule
            return None

    def run(self, json_file_list, final_log, **_) -> np.ndarray:
        """Each neighbour's run times (TVM's Droplet reads NOT_RUN as a neighbour that is no schedule)."""
        results = np.full(len(json_file_list), [NOT_RUN], dtype=list)
        schedules = [(i, sch) for i, sch in ((i, self._schedule(cfg)) for i, cfg in enumerate(json_file_list))
                     if sch is not None]
        if not schedules:
            return results
        built = self.builder.build([ms.builder.BuilderInput(sch.mod, self.target) for _, sch in schedules])
        inputs, ok = [], []
        for (i, sch), b in zip(schedules, built):
            args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)  # as MetaSchedule measures
            if b.error_msg is None:
                inputs.append(ms.runner.RunnerInput(b.artifact_path, self.dev, args))
                ok.append((i, sch, args, b))
            else:
                self._commit(sch, args, None)
        for (i, sch, args, b), future in zip(ok, self.runner.run(inputs)):
            result = future.result()
            secs = None if result.error_msg else [float(v) for v in result.run_secs]
            self._commit(sch, args, secs)
            remove_build_dir(b.artifact_path)
            if secs:
                results[i] = secs
        return results

    def _commit(self, sch: Schedule, args: list, secs: list[float] | None) -> None:
        """The candidate's record, with MetaSchedule's failure time when it did not build or run."""
        self.database.commit_tuning_record(ms.database.TuningRecord(
            sch.trace, self.workload, secs if secs else [FAILED_SECONDS], self.target, args))
        self.measured += 1


class _Droplet(Droplet):
    """TVM's Droplet over a `_MeasuredSpace`, started from `record`."""

    def __init__(self, record: ms.database.TuningRecord, target: tvm.target.Target, database: ms.Database,
                 builder: ms.Builder, runner: ms.Runner, log: str):
        data = [0, record_json(record)]
        super().__init__(data, _plain(record.workload.as_json()), target, log)
        self.space = _MeasuredSpace(data, record.workload, target, database, builder, runner)


def shares(weights: list[float], total: int) -> list[int]:
    """`total` measurements split in proportion to `weights` (largest remainders get the leftovers)."""
    whole = sum(weights)
    if total <= 0 or whole <= 0:
        return [0] * len(weights)
    raw = [total * w / whole for w in weights]
    out = [math.floor(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: out[i] - raw[i])[:total - sum(out)]:
        out[i] += 1
    return out


def droplet_stage(mod: tvm.IRModule, target: tvm.target.Target, database: ms.Database, budget: int,
                  op_filter: str | None = None, after_batch: Callable[[], object] | None = None) -> TuneReport:
    """Spend what is left of `budget` (`database`'s records of `mod`'s kernels count as spent; the run's database,
    open) on Droplet from each kernel's best record, the kernels with the most model time first; unused
    measurements pass to the next."""
    tasks = [t for t in extract_tasks(mod, target) if not op_filter or op_filter in t.task_name]
    report = TuneReport(tasks=len(tasks))
    done = records_per_workload(database)
    before = sum(done.get(tvm_ffi.structural_hash(t.dispatched[0]), 0) for t in tasks)
    left = budget - before
    ranked = []
    for task in tasks:
        if not database.has_workload(task.dispatched[0]):  # never measured: nothing to start from
            continue
        top = database.get_top_k(database.commit_workload(task.dispatched[0]), 1)
        seconds = record_seconds(top[0].run_secs) if top else None
        if seconds is not None:
            ranked.append((float(task.weight) * seconds, task.task_name, top[0]))
    ranked.sort(key=lambda r: -r[0])
    if left <= 0 or not ranked:
        return report
    start = time.perf_counter()
    builder, runner = shared_builder(), ms.runner.LocalRunner()
    plan = shares([r[0] for r in ranked], left)
    carry = 0
    with tempfile.TemporaryDirectory() as scratch:
        for (_, name, best), planned in zip(ranked, plan):
            trials = min(planned + carry, left)
            if trials <= 0:
                continue
            droplet = _Droplet(best, target, database, builder, runner, str(Path(scratch) / f"{name}.log"))
            if not droplet.space.dims:  # a one-schedule space has no neighbours
                carry = trials
                continue
            droplet.tune(trials + 1)  # TVM's count starts at 1 for the record it starts from
            used = droplet.space.measured
            left -= used
            carry = trials - used
            new = database.get_top_k(best.workload, 1)
            print(f"  droplet {name}: {used} measured, best {record_seconds(best.run_secs) * 1e6:.1f} -> "
                  f"{record_seconds(new[0].run_secs) * 1e6:.1f} us", flush=True)
            report.tuned.append(name)
            if after_batch is not None:
                after_batch()
    report.trials = budget - before
    report.measured = sum(records_per_workload(database).values()) - sum(done.values())
    report.seconds = time.perf_counter() - start
    return report
