"""A whole-model budget: batches go where the model's latency is, committed one by one, resumable, with a deadline."""
import math
from types import SimpleNamespace

import pytest
import tvm
import tvm_ffi

from tests.support.kernels import matmul
from tvm_rl.database import TuningDatabase
from tvm_rl.errors import TvmRlError
from tvm_rl.tune import tune_workloads
from tvm_rl.tune.task_scheduler import LatencyShare, untuned_seconds
from tvm_rl.tune.tasks import records_per_workload


def _result(seconds):
    return SimpleNamespace(error_msg=None, run_secs=[seconds])


def test_unmeasured_kernels_are_ranked_by_their_untuned_latency_times_calls():
    share = LatencyShare([1e-3, 1e-5, 1e-4])
    assert share.choose([0, 1, 2], [1.0, 1.0, 1.0]) == 0
    assert share.choose([0, 1, 2], [1.0, 1000.0, 1.0]) == 1  # called 1000 times per run: it is where the time is
    assert share.choose([1, 2], [1.0, 1.0]) == 2


def test_a_measured_kernel_follows_the_gradient_until_an_untuned_one_costs_more():
    share = LatencyShare([1e-1, 2e-3])
    share.observe(0, [_result(2e-3)])  # tuned from 100 ms untuned to 2 ms
    assert share.choose([0, 1], [1.0, 1.0]) == 1  # the other still costs 2 ms untuned: more than 0.8 x 2 ms / 1
    share = LatencyShare([1e-1, 1e-4])
    share.observe(0, [_result(2e-3)])
    assert share.choose([0, 1], [1.0, 1.0]) == 0  # 0.1 ms untuned: another batch on the 2 ms kernel first
    for _ in range(40):  # no progress: best / batches shrinks until the untuned kernel's turn comes
        share.observe(0, [_result(2e-3)])
    assert share.choose([0, 1], [1.0, 1.0]) == 1


def test_a_kernel_that_keeps_improving_outranks_one_that_stalled():
    share = LatencyShare([1e-3, 1e-3])
    for seconds in (4e-3, 3e-3, 2e-3, 1e-3):
        share.observe(0, [_result(seconds)])
    for _ in range(4):
        share.observe(1, [_result(1.2e-3)])
    assert share.choose([0, 1], [1.0, 1.0]) == 0  # improving by 2/3 ms a batch beats a slightly slower flat one


def test_failed_batches_lower_a_kernels_rank_without_hiding_its_history():
    share = LatencyShare([1e-3, 6e-4])
    share.observe(0, [SimpleNamespace(error_msg="build failed", run_secs=None)])
    assert math.isinf(share.best[0])
    assert share.choose([0, 1], [1.0, 1.0]) == 1  # 1 ms untuned, halved by its failed batch, against 0.6 ms
    for seconds in (5e-4, 4e-4, 3e-4):
        share.observe(0, [_result(seconds)])
    assert share._score(0, 1.0) == pytest.approx(0.8 * 3e-4 / 4)  # the failed batch counts, its inf does not


def test_a_resumed_run_starts_from_the_database_history():
    share = LatencyShare([1e-3, 1e-3], prior=[(5e-4, 4), (None, 0)])
    assert share.history[0] == [5e-4] * 4
    assert share._score(0, 1.0) == pytest.approx(0.8 * 5e-4 / 4)


def test_the_untuned_estimate_grows_with_the_work():
    assert untuned_seconds(matmul(64)) > 8 * untuned_seconds(matmul(16))


def test_a_kernel_that_only_moves_data_is_estimated_by_its_bytes():
    """A copy has no FLOPs; its 8 MB read and written (at NAIVE_BYTES) are its estimate, not the 1e-9 floor."""
    from tvm import te

    from tvm_rl.tune.task_scheduler import NAIVE_BYTES

    a = te.placeholder((1024, 1024), name="A")
    b = te.compute((1024, 1024), lambda i, j: a[i, j], name="B")
    copy = tvm.IRModule({"main": te.create_prim_func([a, b])})
    assert untuned_seconds(copy) == pytest.approx(2 * 1024 * 1024 * 4 / NAIVE_BYTES)


def test_a_negative_budget_is_refused(cpu, tmp_path):
    with pytest.raises(TvmRlError, match="budget"):
        tune_workloads([("mm", matmul(8), 1.0)], cpu, tmp_path, budget=-1)


def test_a_deadline_already_passed_measures_nothing(cpu, tmp_path):
    _, report = tune_workloads([("mm", matmul(8), 1.0)], cpu, tmp_path, minutes=1e-9, cost_model="xgb")
    assert report.measured == 0


@pytest.mark.slow
def test_a_budget_goes_to_the_heavy_kernel_batch_by_batch_and_resumes(cpu, tmp_path):
    # 512x the light one's arithmetic, run 8 times as often: a gap no timing noise on a loaded machine closes (at 32
    # the heavy kernel ran in 0.4 us, and one noisy batch sent the last measurement to the light one).
    heavy, light = matmul(64), matmul(8)
    path = tmp_path / "database_tuning_record.json"
    seen: list[int] = []
    workloads = [("light", light, 1.0), ("heavy", heavy, 8.0)]
    quick = dict(trials_per_iter=2, cost_model="xgb", strategy="random")  # the subject is the scheduler
    _, report = tune_workloads(workloads, cpu, tmp_path, budget=4, **quick,
                               after_batch=lambda: seen.append(len(path.read_text().splitlines())))
    assert report.measured == 4
    assert seen == [2, 4]  # each batch is in the database file before the next is chosen
    database, report = tune_workloads(workloads, cpu, tmp_path, budget=4, **quick)
    assert report.measured == 0  # the budget is spent: a rerun measures nothing
    database, report = tune_workloads(workloads, cpu, tmp_path, budget=7, **quick)
    assert report.measured == 3  # a larger budget adds the difference: a batch of 2, then one cut to the last 1
    counts = records_per_workload(database)
    assert counts[tvm_ffi.structural_hash(heavy)] == 7 and counts.get(tvm_ffi.structural_hash(light), 0) == 0
    assert not TuningDatabase(tmp_path).read_exhausted()  # a cut batch is not a space that ran out


def test_the_batch_that_reaches_the_budget_is_cut_to_what_is_left():
    from tvm.s_tir import meta_schedule as ms

    from tvm_rl.tune.search_strategy.budget_cap import BudgetCap

    sch = tvm.s_tir.Schedule(matmul(8))
    batch = [ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_prim_func(sch.mod["main"])) for _ in range(4)]
    notified = []
    inner = SimpleNamespace(generate_measure_candidates=lambda: batch,
                            notify_runner_results=lambda c, r: notified.append(len(r)))
    left = [6]
    cap = BudgetCap(inner, left)
    assert len(cap.generate_measure_candidates()) == 4
    cap.notify_runner_results(batch, [ms.runner.RunnerResult(run_secs=[1e-3], error_msg=None)] * 4)
    assert len(cap.generate_measure_candidates()) == 2 and left == [2] and notified == [4]
    inner.generate_measure_candidates = lambda: None
    assert cap.generate_measure_candidates() is None  # the inner strategy's end passes through


def test_the_cli_takes_a_budget(monkeypatch):
    from tvm_rl import flow_command

    seen = {}

    def fake_optimize(model, target, **kwargs):
        seen.update(kwargs)
        raise SystemExit(0)

    import tvm_rl.flow

    monkeypatch.setattr(tvm_rl.flow, "optimize", fake_optimize)
    with pytest.raises(SystemExit):
        flow_command.main(["--model", "mlp", "--budget", "256", "--minutes", "10"])
    assert seen["budget"] == 256 and seen["minutes"] == 10.0
    flow_command_args = ["--model", "mlp", "--budget", "8", "--library", "lib.jsonl.gz"]
    with pytest.raises(SystemExit):
        flow_command.main(flow_command_args)
    assert seen["library"] == "lib.jsonl.gz"



def test_torch_compile_takes_a_budget():
    from tvm_rl.dynamo import Options

    opts = Options.parse({"budget": 64, "minutes": 2})
    assert (opts.budget, opts.minutes, opts.trials_per_kernel) == (64, 2, 0)


@pytest.mark.slow
def test_optimize_spends_a_whole_model_budget(tmp_path):
    from tvm import relax

    import tvm_rl

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((16, 32), "float32"))
    w = relax.Var("w", relax.TensorType((32, 32), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.relu(relax.op.matmul(x, w))))
        bb.emit_func_output(out)
    out = tvm_rl.optimize(bb.get(), "llvm", work_dir=tmp_path, rewrite=False, budget=4, cost_model="xgb",
                          strategy="random", repeat=3)
    assert out.report.trials_measured == 4
