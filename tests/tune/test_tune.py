"""Tuning into the shared database: exhausted spaces end, identical kernels are tuned once, runs resume."""
import json
from types import SimpleNamespace

import pytest
import tvm
from tvm import te

from tvm_rl import measure, models
from tvm_rl.database import TuningDatabase
from tvm_rl.tune import extract_tasks, open_database, tune_model, tune_workloads
from tvm_rl.tune.search_strategy.exhaustion import StopWhenExhausted
from tvm_rl.tune.tasks import records_per_workload


class FakeStrategy:
    def __init__(self, sizes):
        self.sizes = list(sizes)

    def pre_tuning(self, *args):
        pass

    def generate_measure_candidates(self):
        return [object()] * self.sizes.pop(0) if self.sizes else None


def test_short_or_empty_batch_ends_the_task():
    # `_inst` is the Python object behind TVM's derived-object wrapper (whose FFI checks candidate types).
    full_then_short = StopWhenExhausted(FakeStrategy([8, 3, 8]))._inst
    full_then_short.pre_tuning(64, 8, [], None, None)
    assert [len(full_then_short.generate_measure_candidates()) for _ in range(2)] == [8, 3]
    assert full_then_short.generate_measure_candidates() is None
    empty = StopWhenExhausted(FakeStrategy([0, 8]))._inst
    empty.pre_tuning(64, 8, [], None, None)
    assert empty.generate_measure_candidates() is None


class Raises(FakeStrategy):
    def _initialize_with_tune_context(self, context):
        pass

    def generate_measure_candidates(self):
        raise RuntimeError("parallel_for_dynamic error with Check failed\n"
                           "Literal value 2949120000 exceeds range of int32")

    def clone(self):
        return Raises([])


def test_a_failed_search_ends_its_task_with_the_error_named_and_not_the_run(capsys, monkeypatch):
    errors = {}
    wrapper = StopWhenExhausted(Raises([]), errors)._inst
    wrapper._initialize_with_tune_context(SimpleNamespace(task_name="conv2d251"))
    wrapper.pre_tuning(64, 8, [], None, None)
    assert wrapper.generate_measure_candidates() is None  # the task scheduler ends this task, the others go on
    assert errors == {"conv2d251": "RuntimeError: Literal value 2949120000 exceeds range of int32"}
    assert "conv2d251: its search failed (RuntimeError: Literal value" in capsys.readouterr().out
    assert wrapper.generate_measure_candidates() is None
    assert wrapper.clone()._inst.errors is errors  # each task's clone reports into the run's one dict
    monkeypatch.setattr("tvm_rl.tune.search_strategy.exhaustion.interrupt_pending", lambda: True)
    with pytest.raises(RuntimeError):  # Ctrl-C that surfaced as another error is still a stop
        StopWhenExhausted(Raises([]))._inst.generate_measure_candidates()


def test_a_knob_space_strategy_keeps_its_short_batches_and_a_failed_search_still_ends_only_its_task():
    knobs = StopWhenExhausted(FakeStrategy([8, 3, 8]), end_when_short=False)._inst
    knobs.pre_tuning(64, 8, [], None, None)
    assert [len(knobs.generate_measure_candidates()) for _ in range(3)] == [8, 3, 8]  # short on purpose: goes on
    assert knobs.generate_measure_candidates() is None  # its own end
    errors = {}
    failing = StopWhenExhausted(Raises([]), errors, end_when_short=False)._inst.clone()._inst
    failing._initialize_with_tune_context(SimpleNamespace(task_name="dense3"))
    assert failing.generate_measure_candidates() is None and "dense3" in errors
    assert failing.end_when_short is False  # clones keep the setting


def test_tasks_follow_the_build_kernels(cpu):
    model = models.load("bert", "tiny")
    names = {t.task_name for t in extract_tasks(model.mod, cpu)}
    assert any("matmul" in n for n in names) and any("softmax" in n for n in names)


def test_corrupt_database_is_named(tmp_path):
    (tmp_path / "database_workload.json").write_text("{not json\n")
    (tmp_path / "database_tuning_record.json").write_text("")
    with pytest.raises(Exception, match="tuning database in .* is unreadable"):
        open_database(tmp_path)


@pytest.mark.slow
def test_tune_build_and_resume(cpu, tmp_path, capsys):
    model = models.load("bert", "tiny")
    db, report = tune_model(model.mod, cpu, tmp_path, trials_per_kernel=4, trials_per_iter=4,
                            op_filter="fused_matmul_add")
    (name,) = report.tuned
    assert name.startswith("fused_matmul_add") and report.trials == 4
    assert f"{name} (1/1): 4 trials, best" in capsys.readouterr().out  # one progress line per batch
    counts = records_per_workload(db)
    assert sum(counts.values()) >= 1
    lines = (tmp_path / "database_tuning_record.json").read_text().splitlines()
    assert all(json.loads(line) for line in lines)  # appended record by record, each a whole JSON line
    # Tuned kernels replace the default ones and the model still computes the same function.
    runner = measure.Runner(measure.build(model.mod, cpu, database=db), cpu)
    measure.assert_close(runner(model.inputs), model.reference_outputs())
    # A second run with the same budget finds the work done: nothing is measured again.
    _, again = tune_model(model.mod, cpu, tmp_path, trials_per_kernel=4, op_filter="fused_matmul_add")
    assert again.tuned == [] and again.skipped == [name] and again.trials == 0


@pytest.mark.slow
def test_an_exhausted_kernel_is_not_searched_again(cpu, tmp_path):
    """A kernel with fewer schedules than its budget is marked in exhausted.json and skipped next time."""
    a = te.placeholder((8,), name="A")
    b = te.compute((8,), lambda i: a[i] * 2.0, name="B")
    workload = [("scale8", tvm.IRModule({"main": te.create_prim_func([a, b])}), 1.0)]
    db, first = tune_workloads(workload, cpu, tmp_path, trials_per_kernel=32, trials_per_iter=8)
    have = sum(records_per_workload(db).values())
    assert first.tuned == ["scale8"] and 0 < have < 32
    assert list(TuningDatabase(tmp_path).read_exhausted().values()) == [have]
    _, again = tune_workloads(workload, cpu, tmp_path, trials_per_kernel=32, trials_per_iter=8)
    assert again.skipped == ["scale8"] and again.tuned == [] and again.measured == 0


@pytest.mark.slow
def test_each_kernels_records_are_in_the_database_before_the_next_kernel_is_measured(cpu, tmp_path):
    """A model's kernels are tuned in one call; a kill must not lose the kernels already measured. MetaSchedule's
    default (gradient) scheduler committed nothing until every kernel had its first batch."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    path = tmp_path / "database_tuning_record.json"

    @derived_object
    class SyncRunner(ms.runner.PyRunner):
        """The local runner, waited on before returning (so its results are ready to commit at once), noting
        how many records the database file held when each batch came in."""

        def __init__(self):
            super().__init__()
            self.inner = ms.runner.LocalRunner()
            self.lines_before: list[int] = []

        def run(self, inputs):
            self.lines_before.append(len(path.read_text().splitlines()) if path.is_file() else 0)
            futures = self.inner.run(inputs)
            for future in futures:
                future.result()
            return futures

    def scale(n, k):
        a = te.placeholder((n,), name="A")
        b = te.compute((n,), lambda i: a[i] * k, name="B")
        return tvm.IRModule({"main": te.create_prim_func([a, b])})

    runner = SyncRunner()
    workloads = [(f"scale{n}", scale(n, 2.0), 1.0) for n in (64, 128, 256)]
    seen_after: list[int] = []  # `after_batch` sees each batch's records in the file (a benchmark archives them)
    tune_workloads(workloads, cpu, tmp_path, trials_per_kernel=2, trials_per_iter=2, runner=runner,
                   after_batch=lambda: seen_after.append(len(path.read_text().splitlines())))
    lines_before = runner.lines_before
    assert len(lines_before) == 3
    assert lines_before[1] >= 1 and lines_before[2] > lines_before[1], lines_before
    assert seen_after == [*lines_before[1:], len(path.read_text().splitlines())]


@pytest.mark.slow
def test_a_resumed_run_trains_its_cost_model_on_the_records_already_measured(cpu, tmp_path):
    """MetaSchedule trains the model only on what its loop measures: a resumed evolutionary search would otherwise
    search with a model that forgot the first sitting's records."""
    from tvm.s_tir import meta_schedule as ms

    a, b = te.placeholder((32, 32), name="A"), te.placeholder((32, 32), name="B")
    k = te.reduce_axis((0, 32), name="k")
    c = te.compute((32, 32), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    workload = [("matmul32", tvm.IRModule({"main": te.create_prim_func([a, b, c])}), 1.0)]
    tune_workloads(workload, cpu, tmp_path, trials_per_kernel=2, trials_per_iter=2, cost_model="xgb")
    model = ms.cost_model.XGBModel(num_warmup_samples=0)
    _, resumed = tune_workloads(workload, cpu, tmp_path, trials_per_kernel=4, trials_per_iter=2, cost_model=model)
    assert resumed.measured == 2
    assert model.data_size == 4  # the first sitting's 2 records, then the 2 it measured
