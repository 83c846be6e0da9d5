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


def test_runner_for_names_warm_and_cold_and_refuses_cold_on_a_gpu(cpu):
    from tvm_rl.errors import TvmRlError
    from tvm_rl.tune.runner import is_cold, runner_for

    assert runner_for(cpu, "warm") == "local" and not is_cold("local")
    assert is_cold(runner_for(cpu, "cold"))
    with pytest.raises(TvmRlError, match="a cuda target measures warm"):
        runner_for(tvm.target.Target("cuda"), "cold")
    with pytest.raises(TvmRlError, match="measure must be one of warm, cold"):
        runner_for(cpu, "hot")


def test_a_cold_run_measures_a_librarys_exact_record_instead_of_applying_its_warm_time(cpu, tmp_path):
    from tvm_rl.tune.library import build_library

    tune_workloads([("mm", matmul(16), 1.0)], cpu, tmp_path / "warm", trials_per_kernel=2, trials_per_iter=2,
                   strategy="random", cost_model="xgb")
    library = build_library([tmp_path / "warm"], tmp_path / "library.jsonl.gz")
    _, warm = tune_workloads([("mm", matmul(16), 1.0)], cpu, tmp_path / "warm-again", trials_per_kernel=2,
                             trials_per_iter=2, cost_model="xgb", library=library)
    assert warm.from_library == ["mm"]  # the same library under the warm runner: applied unmeasured
    _, cold = tune_workloads([("mm", matmul(16), 1.0)], cpu, tmp_path / "cold", trials_per_kernel=2,
                             trials_per_iter=2, cost_model="xgb", library=library, runner=cold_runner(cpu))
    folder = TuningDatabase(tmp_path / "cold")
    assert cold.from_library == [] and folder.read_from_library() == {}
    records = folder.open().get_all_tuning_records()
    assert records and all(len(r.run_secs) == COLD_REPEAT for r in records)  # every record timed cold
