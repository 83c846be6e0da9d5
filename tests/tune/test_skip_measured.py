"""SkipMeasured drops a proposed schedule the task's database already holds, also after the records went through
the JSON files on disk (a resumed run), and one it proposed earlier in the same run."""
from types import SimpleNamespace

import tvm
import tvm_ffi
from kernels import matmul
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from tvm_rl.tune.search_strategy.skip_measured import SkipMeasured, trace_key


def candidate(mod: tvm.IRModule, inner: int) -> ms.MeasureCandidate:
    """A schedule of `mod` with a tile decision and a boolean annotation (as MetaSchedule's layout-rewrite
    postprocessor writes one): JSON has no booleans, so the database gives the annotation back as 1."""
    sch = Schedule(mod)
    block = sch.get_sblock("C")
    i, _, _ = sch.get_loops(block)
    sch.split(i, sch.sample_perfect_tile(i, n=2, decision=[16 // inner, inner]))
    sch.annotate(block, "meta_schedule.layout_rewrite_preproc", True)
    return ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_prim_func(mod["main"]))


class Proposes:
    """An inner strategy that proposes the same batch every round."""

    def __init__(self, batch):
        self.batch = batch

    def _initialize_with_tune_context(self, context):
        pass

    def pre_tuning(self, *args):
        pass

    def generate_measure_candidates(self):
        return list(self.batch)

    def notify_runner_results(self, *args):
        pass


def test_a_recorded_schedule_read_back_from_disk_is_not_measured_again(tmp_path):
    mod = matmul(16)
    target = tvm.target.Target("llvm")
    recorded, fresh = candidate(mod, 4), candidate(mod, 8)
    db = ms.database.JSONDatabase(work_dir=str(tmp_path))
    db.commit_tuning_record(ms.database.TuningRecord(recorded.sch.trace, db.commit_workload(mod), [1e-3], target,
                                                     recorded.args_info))
    reopened = ms.database.JSONDatabase(work_dir=str(tmp_path))  # what a resumed run reads
    (record,) = reopened.get_all_tuning_records()
    assert trace_key(record.trace) == trace_key(recorded.sch.trace)
    # The records' modules no longer hash as the schedules' did: why keying on modules alone let them through.
    rebuilt = Schedule(record.workload.mod)
    record.trace.apply_to_schedule(rebuilt, remove_postproc=False)
    assert not tvm_ffi.structural_equal(rebuilt.mod, recorded.sch.mod)

    skip = SkipMeasured(Proposes([recorded, fresh]))._inst  # the Python object TVM's calls reach
    skip._initialize_with_tune_context(SimpleNamespace(mod=mod))
    skip.pre_tuning(8, 2, [], reopened, None)
    out = skip.generate_measure_candidates()
    assert [trace_key(c.sch.trace) for c in out] == [trace_key(fresh.sch.trace)]
    assert skip.skipped[0] >= 1
    # Proposed again in the same run: dropped too, and an inner strategy with nothing new ends the batch empty.
    assert skip.generate_measure_candidates() == []
