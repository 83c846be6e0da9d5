"""SkipMeasured drops a proposed schedule the task's database already holds, also after the records went through
the JSON files on disk (a resumed run), and one it proposed earlier in the same run."""
from types import SimpleNamespace

import tvm
import tvm_ffi
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from tests.support.kernels import matmul
from tvm_rl.tune.search_strategy.exhaustion import StopWhenExhausted
from tvm_rl.tune.search_strategy.skip_measured import SkipMeasured, trace_key


def candidate(mod: tvm.IRModule, inner: int, inner_j: int | None = None) -> ms.MeasureCandidate:
    """A schedule of `mod` with a tile decision (two, with `inner_j`) and a boolean annotation (as MetaSchedule's
    layout-rewrite postprocessor writes one): JSON has no booleans, so the database gives the annotation back as 1."""
    sch = Schedule(mod)
    block = sch.get_sblock("C")
    i, j, _ = sch.get_loops(block)
    sch.split(i, sch.sample_perfect_tile(i, n=2, decision=[16 // inner, inner]))
    if inner_j is not None:
        sch.split(j, sch.sample_perfect_tile(j, n=2, decision=[16 // inner_j, inner_j]))
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


class ProposesInTurn(Proposes):
    """An inner strategy that proposes the next batch of `batches` each round (as evolutionary search does, it
    never proposes the same schedule twice), then nothing."""

    def __init__(self, batches):
        self.batches = iter(batches)

    def generate_measure_candidates(self):
        return list(next(self.batches, []))


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


def test_a_resumed_task_whose_search_proposes_its_records_first_searches_again_only_for_an_empty_batch(tmp_path):
    # A resumed task: five records in the database that the new search state has never proposed, and rates highest.
    mod, target = matmul(16), tvm.target.Target("llvm")
    recorded = [candidate(mod, 1, j) for j in (1, 2, 4, 8, 16)]
    db = ms.database.JSONDatabase(work_dir=str(tmp_path))
    workload = db.commit_workload(mod)
    for c in recorded:
        db.commit_tuning_record(ms.database.TuningRecord(c.sch.trace, workload, [1e-3], target, c.args_info))
    fresh = [candidate(mod, 2, j) for j in (1, 2, 4)]
    inner = ProposesInTurn([recorded[:2], recorded[2:4], [recorded[4], fresh[0]], fresh[1:]])
    drained = [False]
    stop = StopWhenExhausted(SkipMeasured(inner, short_by_drops=drained), short_by_drops=drained)._inst
    skip = stop.inner._inst  # the Python objects TVM's calls reach
    skip._initialize_with_tune_context(SimpleNamespace(mod=mod))
    stop.pre_tuning(64, 2, [], ms.database.JSONDatabase(work_dir=str(tmp_path)), None)
    # Batches of records only are searched again (three tries would have ended at one candidate); the batch with
    # one new schedule goes out short, not bought up with another full search, and does not end the task.
    out = stop.generate_measure_candidates()
    assert [trace_key(c.sch.trace) for c in out] == [trace_key(fresh[0].sch.trace)]
    assert skip.skipped[0] == 5 and drained == [True] and not stop.exhausted
    out = stop.generate_measure_candidates()
    assert [trace_key(c.sch.trace) for c in out] == [trace_key(c.sch.trace) for c in fresh[1:]]
    assert drained == [False]
    # A short batch with nothing drained is a space run out: the task ends.
    assert stop.generate_measure_candidates() is None


def test_a_batch_short_by_a_library_record_goes_out_without_a_second_search(tmp_path):
    mod, target = matmul(16), tvm.target.Target("llvm")
    library_record, fresh = candidate(mod, 4), [candidate(mod, 2, j) for j in (1, 2, 4)]
    db = ms.database.JSONDatabase(work_dir=str(tmp_path))
    db.commit_tuning_record(ms.database.TuningRecord(library_record.sch.trace, db.commit_workload(mod), [1e-3],
                                                     target, library_record.args_info))
    calls = []

    class Counted(ProposesInTurn):
        def generate_measure_candidates(self):
            calls.append(1)
            return super().generate_measure_candidates()

    # The record twice, as `Seeded` hands it out and the inner search proposes it too, and so a new schedule.
    batch = [library_record, *fresh[:2], library_record, candidate(mod, 2, 1)]
    skip = SkipMeasured(Counted([batch, fresh[2:]]))._inst
    skip._initialize_with_tune_context(SimpleNamespace(mod=mod))
    skip.pre_tuning(64, 4, [], ms.database.JSONDatabase(work_dir=str(tmp_path)), None)
    assert len(skip.generate_measure_candidates()) == 2 and len(calls) == 1 and skip.short_by_drops == [True]


def test_tries_that_drop_only_schedules_of_this_run_stay_bounded():
    mod = matmul(16)
    again = candidate(mod, 4)
    calls = []

    class Repeats(Proposes):
        def generate_measure_candidates(self):
            calls.append(1)
            return [again]

    skip = SkipMeasured(Repeats([]))._inst
    skip._initialize_with_tune_context(SimpleNamespace(mod=mod))
    skip.pre_tuning(64, 2, [], None, None)
    assert len(skip.generate_measure_candidates()) == 1
    calls.clear()
    assert skip.generate_measure_candidates() == [] and len(calls) == 3  # nothing new: `tries` calls, then short
