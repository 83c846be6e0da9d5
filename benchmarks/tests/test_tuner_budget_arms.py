"""The end-to-end benchmark's whole-model budget arms (benchmarks/e2e/budget.py)."""
import pytest
import tvm
import tvm_ffi
from tvm import relax

from benchmarks.e2e import run as e2e
from benchmarks.e2e.budget import BUDGET_ARMS, tune_budget, tune_like_metaschedule
from benchmarks.e2e.table import baseline_of, table_rows
from tvm_rl.database import TuningDatabase
from tvm_rl.measure import host_cpu_target
from tvm_rl.tune.library import build_library
from tvm_rl.tune.tasks import extract_tasks, records_per_workload


def test_budget_arms_are_known_and_held_against_metaschedule_at_the_same_budget():
    assert e2e.resolve_arms(["budget-ours", "budget-metaschedule"], "xgb-pretrained") == \
        ["budget-ours", "budget-metaschedule"]
    with pytest.raises(SystemExit, match="budget-ours.*--cost-model"):
        e2e.resolve_arms(["budget-ours"], None)
    assert baseline_of("budget-ours") == baseline_of("budget-even") == "budget-metaschedule"
    assert baseline_of("ppo") == "evolutionary"
    runs = {f"{arm}/N256/s0": {"arm": arm, "trials": 256, "seed": 0, "label": arm} for arm in BUDGET_ARMS}
    variants = {"TVM default": {"ms": 10.0}, "budget-ours/N256/s0": {"ms": 2.0},
                "budget-even/N256/s0": {"ms": 5.0}, "budget-metaschedule/N256/s0": {"ms": 4.0}}
    rows = {r["variant"]: r for r in table_rows({"runs": runs, "timing": {"variants": variants}})}
    assert rows["budget-ours"]["vs_evolutionary"] == 2.0 and rows["budget-even"]["vs_evolutionary"] == 0.8
    assert rows["budget-metaschedule"]["vs_evolutionary"] is None


def _two_matmuls() -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((16, 32), "float32"))
    w = relax.Var("w", relax.TensorType((32, 32), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, w))
            z = bb.emit(relax.op.add(y, y))
            out = bb.emit_output(z)
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.slow
def test_each_budget_arm_spends_its_budget_and_a_rerun_spends_nothing(tmp_path):
    mod, target = _two_matmuls(), host_cpu_target()
    keys = {tvm_ffi.structural_hash(t.dispatched[0]) for t in extract_tasks(mod, target)}
    for arm in BUDGET_ARMS:  # budget-ours first: the library arm starts from its records
        folder = tmp_path / arm
        library, applied = None, 0
        if arm.startswith("budget-ours-library"):
            built = build_library([tmp_path / "budget-ours"], tmp_path / "library.jsonl.gz")
            library, applied = built.path, len(built.workloads())
            assert applied >= 1
        database, report = tune_budget(arm, mod, target, folder, 4, 0, 2, "xgb", None, None, None, library)
        assert 4 <= report.measured <= 5, (arm, report)  # a batch may overshoot
        unmeasured = sum(TuningDatabase(folder).read_from_library().values())
        assert unmeasured == applied  # what budget-ours measured on this target: applied, unmeasured
        assert sum(records_per_workload(database)[k] for k in keys) == report.measured + unmeasured
        _, again = tune_budget(arm, mod, target, folder, 4, 0, 2, "xgb", None, None, None, library)
        assert again.measured == 0, arm


def test_metaschedule_arm_refuses_nothing_when_the_budget_is_spent(tmp_path):
    _, report = tune_like_metaschedule(_two_matmuls(), host_cpu_target(), tmp_path, 0, 0)
    assert report.measured == 0 and report.tasks >= 1
