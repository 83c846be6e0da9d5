"""benchmarks/retime_top.py: a database whose heavy kernels' top records carry re-measured times."""
import tvm_ffi

from benchmarks.retime_top import retimed_database
from tests.support.kernels import matmul
from tvm_rl.database import TuningDatabase, record_seconds
from tvm_rl.tune import tune_workloads


def test_top_records_are_measured_again_and_light_kernels_keep_their_best(cpu, tmp_path):
    tune_workloads([("mm", matmul(16), 1.0)], cpu, tmp_path / "db", trials_per_kernel=3, trials_per_iter=3,
                   strategy="random", cost_model="xgb")
    source = TuningDatabase(tmp_path / "db").open()
    (workload,) = {tvm_ffi.structural_hash(r.workload.mod): r.workload
                   for r in source.get_all_tuning_records()}.values()
    top = source.get_top_k(workload, 2)
    assert len(top) == 2

    heavy = retimed_database(source, tmp_path / "heavy", top=2, repeats=2, min_ms=0.0, target=cpu)
    assert heavy["measurements"] == 4
    again = TuningDatabase(tmp_path / "heavy").open().get_all_tuning_records()
    assert len(again) == 2 and {str(r.trace) for r in again} == {str(r.trace) for r in top}
    (rows,) = heavy["kernels"].values()
    assert sorted(r["median_ms"] for r in rows) == sorted(record_seconds(r.run_secs) * 1e3 for r in again)

    light = retimed_database(source, tmp_path / "light", top=2, repeats=2, min_ms=1e9, target=cpu)
    assert light["measurements"] == 0 and not light["kernels"]
    (kept,) = TuningDatabase(tmp_path / "light").open().get_all_tuning_records()
    assert str(kept.trace) == str(top[0].trace)
    assert [float(s) for s in kept.run_secs] == [float(s) for s in top[0].run_secs]
