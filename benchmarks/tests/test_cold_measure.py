"""benchmarks/cold_measure.py: warm and cold measurements of each kernel beside its time inside the model."""
import math
from types import SimpleNamespace

import pytest
from tvm.s_tir import meta_schedule as ms

from benchmarks import cold_measure
from benchmarks.remeasure_best import remeasure
from tests.support.kernels import matmul
from tvm_rl.tune import tune_workloads
from tvm_rl.tune.runner import cold_runner


def test_constant_bytes_leave_out_the_input_and_the_output():
    assert cold_measure.argument_bytes(matmul(16)) == 16 * 16 * 4  # B only: A is the input, C the output


def test_in_model_time_is_per_call_and_finds_a_prepacked_kernel():
    times = {"k1_prepacked": {"ms": 3.0, "calls": 2.0}, "k2": {"ms": 1.0, "calls": 1.0}}
    assert cold_measure.in_model(times, "k1") == 1.5 and cold_measure.in_model(times, "k2") == 1.0
    assert cold_measure.in_model(times, "k3") is None


def test_rows_and_summary_say_which_measurement_the_model_follows():
    tasks = [(SimpleNamespace(task_name=n, weight=w, dispatched=[matmul(16)]), None) for n, w in (("a", 2), ("b", 1))]
    times = {"warm": [[1e-3, 1e-3], [2e-3, 2e-3]], "cold": [[2e-3, 2e-3], [2e-3, 2e-3]]}
    model = {"a": {"ms": 4.0, "calls": 2.0}, "b": {"ms": 2.0, "calls": 1.0}}
    rows = cold_measure.rows_for(tasks, times, model)
    assert [r["model_over_warm"] for r in rows] == pytest.approx([2.0, 1.0])
    assert [r["model_over_cold"] for r in rows] == pytest.approx([1.0, 1.0])
    total = cold_measure.summary(rows)
    assert (total["warm_total_ms"], total["cold_total_ms"], total["model_total_ms"]) == pytest.approx((4.0, 6.0, 6.0))
    assert total["cold_median_abs_log_error"] == 0.0
    assert total["warm_median_abs_log_error"] == pytest.approx(math.log(2.0) / 2)


def test_records_are_measured_by_each_runner_interleaved(cpu, tmp_path):
    database, _ = tune_workloads([("mm", matmul(16), 1.0)], cpu, tmp_path, trials_per_kernel=1, trials_per_iter=1,
                                 strategy="random", cost_model="xgb")
    records = database.get_all_tuning_records()
    times = remeasure(records, cpu, 2, {"warm": ms.runner.LocalRunner(), "cold": cold_runner(cpu)})
    assert set(times) == {"warm", "cold"}
    assert all(len(t) == 1 and len(t[0]) == 2 and all(s > 0 for s in t[0]) for t in times.values())
