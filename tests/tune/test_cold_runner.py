"""tune.runner.cold_runner: single calls, each after the cache is flushed of the kernel's weights."""
import pytest
import tvm

from tests.support.kernels import matmul
from tvm_rl.database import TuningDatabase
from tvm_rl.tune import tune_workloads
from tvm_rl.tune.runner import cold_runner
from tvm_rl.tune.runner.cold import COLD_REPEAT, cold_evaluator


def test_cold_timing_is_single_flushed_calls_on_a_cpu_and_single_calls_elsewhere(cpu):
    config = cold_evaluator(cpu, repeat=5)
    assert (config.number, config.repeat, config.min_repeat_ms, config.enable_cpu_cache_flush) == (1, 5, 0, True)
    assert not cold_evaluator(tvm.target.Target("cuda")).enable_cpu_cache_flush
    with pytest.raises(ValueError, match="at least one call"):
        cold_evaluator(cpu, repeat=0)


def test_a_kernel_tuned_with_the_cold_runner_keeps_each_single_call(cpu, tmp_path):
    tune_workloads([("mm", matmul(16), 1.0)], cpu, tmp_path, trials_per_kernel=2, trials_per_iter=2,
                   strategy="random", cost_model="xgb", runner=cold_runner(cpu))
    records = TuningDatabase(tmp_path).open().get_all_tuning_records()
    assert len(records) == 2
    assert all(len(r.run_secs) == COLD_REPEAT and all(float(s) > 0 for s in r.run_secs) for r in records)
