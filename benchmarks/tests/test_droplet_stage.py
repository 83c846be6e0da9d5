"""TVM's Droplet Search as a budget's last stage (benchmarks/e2e/droplet.py)."""
import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

from benchmarks.e2e.droplet import droplet_stage, shares
from tvm_rl import measure
from tvm_rl.database import TuningDatabase, record_seconds
from tvm_rl.measure import host_cpu_target
from tvm_rl.tune.tasks import extract_tasks, records_per_workload, tune_model


def test_shares_split_a_budget_in_proportion_and_spend_all_of_it():
    assert shares([3.0, 1.0], 8) == [6, 2]
    assert sum(shares([1.0, 1.0, 1.0], 10)) == 10
    assert shares([1.0, 2.0], 0) == [0, 0] and shares([0.0], 5) == [0]


WEIGHT = np.random.default_rng(1).standard_normal((64, 32)).astype("float32")


def _matmul():
    """x @ W with W a constant, as a model's weight is: its kernel's schedules rewrite W's layout, so a record's
    arguments are not the PrimFunc's (what the stage measured wrong before)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((16, 64), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.matmul(x, relax.const(tvm.runtime.tensor(WEIGHT))))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.slow
def test_droplet_walks_from_the_best_record_within_the_budget_and_its_schedules_compute_the_matmul(tmp_path):
    mod, target = _matmul(), host_cpu_target()
    database, _ = tune_model(mod, target, tmp_path, trials_per_kernel=2, trials_per_iter=2, strategy="random")
    key = tvm_ffi.structural_hash(extract_tasks(mod, target)[0].dispatched[0])
    report = droplet_stage(mod, target, database, budget=10)
    count = records_per_workload(database)[key]
    assert 1 <= report.measured <= 8 and count == 2 + report.measured
    records = database.get_all_tuning_records()
    assert any(record_seconds(r.run_secs) is not None for r in records[2:])  # a neighbour built and ran
    # The database's best (a Droplet neighbour or the start) builds into a model that still multiplies.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 64)).astype("float32")
    out = measure.Runner(measure.build(mod, target, database=database), target)([x])
    np.testing.assert_allclose(out[0], x @ WEIGHT, rtol=1e-4, atol=1e-4)
    # Spent: a rerun at the same budget measures nothing.
    assert droplet_stage(mod, target, TuningDatabase(tmp_path).open(), budget=count).measured == 0  # from its files
