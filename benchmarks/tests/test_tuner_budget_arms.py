"""The end-to-end benchmark's whole-model budget arms (benchmarks/e2e/budget.py)."""
import pytest
import tvm_ffi

from benchmarks.e2e import run as e2e
from benchmarks.e2e.budget import BUDGET_ARMS, tune_budget, tune_like_metaschedule
from benchmarks.e2e.table import baseline_of, table_rows
from tests.support.kernels import relax_matmul
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


@pytest.mark.slow
def test_each_budget_arm_spends_its_budget_and_a_rerun_spends_nothing(tmp_path):
    mod, target = relax_matmul(), host_cpu_target()
    keys = {tvm_ffi.structural_hash(t.dispatched[0]) for t in extract_tasks(mod, target)}
    for arm in BUDGET_ARMS:  # budget-ours first: the library arm starts from its records
        folder = tmp_path / arm
        library, applied = None, 0
        if BUDGET_ARMS[arm][2].startswith("latency-share+library"):
            built = build_library([tmp_path / "budget-ours"], tmp_path / "library.jsonl.gz")
            library, applied = built.path, len(built.workloads())
            assert applied >= 1
        database, report = tune_budget(arm, mod, target, folder, 4, 0, 2, "xgb", None, None, None, library)
        assert 4 <= report.measured <= 5, (arm, report)  # a batch may overshoot
        unmeasured = sum(TuningDatabase(folder).read_from_library().values())
        if arm.endswith("-cold"):  # the library's warm-timed records only seed it, and are measured there
            assert unmeasured == 0
        elif not arm.endswith("-shipped"):  # that arm starts from the shipped library, measured on another CPU
            assert unmeasured == applied  # what budget-ours measured on this target: applied, unmeasured
        assert sum(records_per_workload(database)[k] for k in keys) == report.measured + unmeasured
        _, again = tune_budget(arm, mod, target, folder, 4, 0, 2, "xgb", None, None, None, library)
        assert again.measured == 0, arm


def test_metaschedule_arm_refuses_nothing_when_the_budget_is_spent(tmp_path):
    _, report = tune_like_metaschedule(relax_matmul(), host_cpu_target(), tmp_path, 0, 0)
    assert report.measured == 0 and report.tasks >= 1


@pytest.mark.slow
def test_the_optimize_and_ms_static_arms_tune_and_time_their_module_made_once(tmp_path, monkeypatch):
    import numpy as np

    from benchmarks.e2e import budget
    from tvm_rl import measure, models

    model, target = models.load("resnet18", "tiny"), host_cpu_target()
    assert "batch_norm" in model.mod.script()
    assert budget.arm_module("budget-ours-library", model.mod, target, tmp_path / "plain") is model.mod
    folder = tmp_path / "optimize"
    mod = budget.arm_module("budget-optimize", model.mod, target, folder)
    assert (folder / budget.GRAPH_FILE).is_file()
    assert "batch_norm" not in mod.script()  # the graph pass folded them, as `tvm-rl optimize` does
    out = measure.Runner(measure.build(mod, target), target)(model.inputs)
    expected = measure.Runner(measure.build(model.mod, target), target)(model.inputs)
    for a, b in zip(out, expected):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)

    # MetaSchedule on TVM's tuning pipeline's module: batch norms decomposed, the same values.
    static = budget.arm_module("budget-ms-static", model.mod, target, tmp_path / "static")
    assert "batch_norm" not in static.script() and (tmp_path / "static" / budget.GRAPH_FILE).is_file()
    for a, b in zip(measure.Runner(measure.build(static, target), target)(model.inputs), expected):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)

    def no_second_pass(*args, **kwargs):
        raise AssertionError("the graph pass ran again for a run that has its graph")

    monkeypatch.setattr(budget, "graph_stage", no_second_pass)
    assert tvm_ffi.structural_equal(budget.arm_module("budget-optimize", model.mod, target, folder), mod)

    # The timing builds each run from its own module.
    built = {}

    def variant(mod, *args):
        built[len(built)] = mod
        return {}, lambda: 1.0

    monkeypatch.setattr(e2e, "_tvm_variant", variant)
    monkeypatch.setattr(e2e.bench, "time_torch", lambda *a: {"ms": 1.0})
    monkeypatch.setattr(e2e.bench, "OrtTimer", lambda *a: (lambda: 1.0))
    args = e2e._parser(None).parse_args(["--passes", "1"])
    e2e.time_model(model, target, {"budget-optimize/N8/s0": None}, args, tmp_path, {"budget-optimize/N8/s0": mod})
    assert built[0] is model.mod and built[1] is mod  # TVM default, then the run


def test_the_stock_ssrs_and_wsplit_arms_tune_in_their_spaces_and_switch_back(tmp_path, monkeypatch):
    from benchmarks.e2e import budget
    from tvm_rl.tune import design_space

    seen = []
    monkeypatch.setattr(budget, "tune_model", lambda *a, **kw: seen.append(
        (design_space.FUSE_EPILOGUE, design_space.CONV_SSRS, design_space.SPLIT_LARGE_WEIGHTS)) or (None, None))
    for arm in ("budget-optimize-nhwc-stock", "budget-optimize-nhwc-ssrs", "budget-optimize-nhwc-wsplit",
                "budget-optimize-nhwc"):
        tune_budget(arm, relax_matmul(), host_cpu_target(), tmp_path, 4, 0, 2, "xgb", None, None, None, "lib")
    assert seen == [(False, False, False), (True, True, False), (True, False, True), (True, False, False)]
    assert (design_space.FUSE_EPILOGUE, design_space.CONV_SSRS, design_space.SPLIT_LARGE_WEIGHTS) == (
        True, False, False)
    assert "budget-optimize-nhwc-wsplit" in budget.GRAPH_ARMS


def test_the_shipped_library_arm_starts_from_the_shipped_library_whatever_library_is_given(tmp_path, monkeypatch):
    from benchmarks.e2e import budget
    from tvm_rl.tune.library import SHIPPED

    seen = []
    monkeypatch.setattr(budget, "tune_model", lambda *a, **kw: seen.append(kw["library"]) or (None, None))
    for arm in ("budget-optimize-nhwc-shipped", "budget-optimize-nhwc"):
        tune_budget(arm, relax_matmul(), host_cpu_target(), tmp_path, 4, 0, 2, "xgb", None, None, None, "lib")
    assert seen == [SHIPPED, "lib"]
    assert "budget-optimize-nhwc-shipped" in budget.GRAPH_ARMS  # it tunes the graph `optimize` tunes


def test_the_learned_arm_ranks_kernels_by_the_gain_model_it_is_given(tmp_path, monkeypatch):
    from benchmarks.e2e import budget

    seen = []
    monkeypatch.setattr(budget, "tune_model", lambda *a, **kw: seen.append((kw["allocator"], kw["library"]))
                        or (None, None))
    for arm in ("budget-optimize-nhwc-learned", "budget-optimize-nhwc"):
        tune_budget(arm, relax_matmul(), host_cpu_target(), tmp_path, 4, 0, 2, "xgb", None, None, None, "lib",
                    "gain.json")
    assert seen == [("gain.json", "lib"), (None, "lib")]
    assert "budget-optimize-nhwc-learned" in budget.GRAPH_ARMS  # it tunes the graph `optimize` tunes


def test_the_pop128_arm_searches_with_a_quarter_population_and_minutes_reach_the_tuner(tmp_path, monkeypatch):
    from benchmarks.e2e import budget

    seen = []
    monkeypatch.setattr(budget, "tune_model", lambda *a, **kw: seen.append((kw["strategy"], kw["minutes"]))
                        or (None, None))
    for arm in ("budget-optimize-nhwc-pop128", "budget-optimize-nhwc", "budget-optimize-nhwc-stock"):
        tune_budget(arm, relax_matmul(), host_cpu_target(), tmp_path, 4, 0, 2, "xgb", None, None, None, "lib",
                    minutes=2.5)
    assert seen[0][0].population_size == 128 and seen[1][0] == seen[2][0] == "evolutionary"
    assert [m for _, m in seen] == [2.5, 2.5, 2.5]
    assert "budget-optimize-nhwc-pop128" in budget.GRAPH_ARMS
    with pytest.raises(SystemExit, match="budget-ms-static has no time budget"):
        tune_budget("budget-ms-static", relax_matmul(), host_cpu_target(), tmp_path, 4, 0, 2, "xgb", None, None,
                    None, minutes=1.0)


def test_a_run_whose_minutes_are_spent_is_not_tuned_again_and_one_with_minutes_left_gets_them(tmp_path,
                                                                                               monkeypatch):
    from argparse import Namespace
    from types import SimpleNamespace

    class Called(Exception):
        pass

    def tuner(*a):
        seen.append(a[-1])
        raise Called

    seen: list = []
    monkeypatch.setattr(e2e, "tune_budget", tuner)
    model = SimpleNamespace(mod=relax_matmul())
    args = Namespace(minutes=2.0, seeds=1, cost_model=None, op_filter=None, library=None, gain_model="shipped")
    previous = {"arm": "budget-ours", "trials": 64, "seed": 0, "work_dir": str(tmp_path), "tuning_s": 120.0,
                "sittings": 1, "failures": 0}
    _, entry, tuned = e2e.tune_run(model, host_cpu_target(), tmp_path, "budget-ours", 64, 0, args, previous)
    assert not tuned and seen == [] and entry["tuning_s"] == 120.0
    with pytest.raises(Called):
        e2e.tune_run(model, host_cpu_target(), tmp_path, "budget-ours", 64, 0, args, {**previous, "tuning_s": 90.0})
    assert seen == [0.5]


def test_a_time_budget_run_is_named_by_its_minutes_in_the_plot():
    from benchmarks.e2e.table import bar_label

    run = {"arm": "budget-optimize-nhwc", "trials": 4096}
    assert bar_label(run, 10.0) == "budget-optimize-nhwc 10 min"
    assert bar_label(run, None) == "budget-optimize-nhwc N=4096"


def test_the_cold_arm_times_cold(tmp_path, monkeypatch):
    from benchmarks.e2e import budget

    seen = []
    monkeypatch.setattr(budget, "tune_model", lambda *a, **kw: seen.append((kw["runner"], kw["library"]))
                        or (None, None))
    for arm in ("budget-optimize-nhwc-cold", "budget-optimize-nhwc"):
        tune_budget(arm, relax_matmul(), host_cpu_target(), tmp_path, 4, 0, 2, "xgb", None, None, None, "lib")
    (cold, lib_cold), (warm, lib) = seen
    config = cold.evaluator_config
    assert (config.number, config.min_repeat_ms, config.enable_cpu_cache_flush) == (1, 0, True)
    assert warm == "local" and lib == lib_cold == "lib"  # tune_workloads keeps a cold run's library to seeds
    assert "budget-optimize-nhwc-cold" in budget.GRAPH_ARMS
