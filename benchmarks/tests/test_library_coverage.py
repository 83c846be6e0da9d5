"""benchmarks/library_coverage.py: counting the kernels a schedule library covers."""
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from benchmarks.library_coverage import coverage
from tests.support.kernels import relax_matmul
from tvm_rl.database import TuningDatabase
from tvm_rl.measure import host_cpu_target
from tvm_rl.tune.library import build_library
from tvm_rl.tune.tasks import model_workloads


def test_exact_and_kind_matches_are_counted_and_an_epilogue_makes_another_kernel(tmp_path):
    target = host_cpu_target()
    plain = relax_matmul(None)
    ((_, kernel, _),) = model_workloads(plain, target)
    database = TuningDatabase(tmp_path / "db").open()
    sch = Schedule(kernel)
    database.commit_tuning_record(ms.database.TuningRecord(
        sch.trace, database.commit_workload(kernel), [1e-4], target,
        ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)))
    library = build_library([tmp_path / "db"], tmp_path / "lib.jsonl.gz")
    assert {k: v for k, v in coverage(library, plain, target).items() if k != "conv_kinds"} == \
        {"kernels": 1, "exact": 1, "kind": 1}
    fused = coverage(library, relax_matmul("relu"), target)
    assert (fused["kernels"], fused["exact"], fused["kind"]) == (1, 0, 0)
