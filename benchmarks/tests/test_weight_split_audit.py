"""benchmarks/weight_split_audit.py: a run's large-weight kernels, their records sorted into weight-splitting and
weight-replicating schedules."""
import tvm
from tvm.s_tir import meta_schedule as ms

from benchmarks import weight_split_audit
from tests.support.kernels import relax_conv_nhwc
from tvm_rl.database import TuningDatabase
from tvm_rl.tune import extract_tasks


def test_records_are_sorted_by_whether_they_replicate_the_weight(tmp_path, cpu):
    graph = relax_conv_nhwc()  # 16 -> 32 channels on 6x6: an 18,432-byte weight
    (tmp_path / "graph.json").write_text(tvm.ir.save_json(graph))
    (task,) = [t for t in extract_tasks(graph, cpu) if "conv2d" in t.task_name]
    mod = task.dispatched[0]
    database = TuningDatabase(tmp_path).open()
    workload = database.commit_workload(mod)
    for axis, seconds in ((1, 1e-3), (3, 2e-3), (2, 3e-3)):  # rows, channels, columns in parallel
        sch = tvm.s_tir.Schedule(mod)
        sch.parallel(sch.get_loops(sch.get_sblock("conv2d_nhwc"))[axis])
        database.commit_tuning_record(ms.database.TuningRecord(
            sch.trace, workload, [seconds], cpu, ms.arg_info.ArgInfo.from_prim_func(mod["main"])))
    (row,) = weight_split_audit.audit_run(tmp_path, cpu, l2=5000)  # the padded input, 4,096 bytes, fits
    assert row["kernel"] == task.task_name and row["best_splits"] is False
    assert (row["split_records"], row["replicating_records"]) == (1, 2)
    assert (row["best_ms"], row["best_split_ms"], row["best_replicating_ms"]) == (1.0, 2.0, 1.0)
    assert weight_split_audit.audit_run(tmp_path, cpu, l2=1 << 20) == []  # the weight fits: nothing to audit
