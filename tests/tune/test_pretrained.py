"""The pre-trained cost model: training on a corpus (`corpus.train`), its file (round trip, across processes, clear
errors, loaded once per process), the online model MetaSchedule drives (`cost_model.pretrained`), and the
leave-one-workload-out evaluation (`corpus.pretrained_eval`). Synthetic data or a corpus written
without measuring (`kernels.fake_corpus`): seconds each."""
import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
from tvm.s_tir import meta_schedule as ms

from tests.support.kernels import fake_corpus, matmul
from tvm_rl.errors import TvmRlError
from tvm_rl.tune import cost_model
from tvm_rl.tune.corpus import pretrained_eval as E
from tvm_rl.tune.corpus import train as T
from tvm_rl.tune.corpus.command import main as corpus_main
from tvm_rl.tune.corpus.features import corpus_features
from tvm_rl.tune.cost_model import features as F
from tvm_rl.tune.cost_model import pretrained as P

FAST = P.TrainConfig(max_rounds=40, early_stopping=10)


def synthetic(n_workloads: int = 4, per: int = 24, seed: int = 0) -> list[F.WorkloadFeatures]:
    """Workloads whose latency follows one hidden rule of the features (so there is something to transfer)."""
    rng = np.random.default_rng(seed)
    weights = rng.normal(size=164)
    out = []
    for w in range(n_workloads):
        scale = 10.0 ** rng.uniform(-6, -3)  # workloads of very different sizes share one normalised scale
        features, seconds = [], []
        for _ in range(per):
            x = rng.normal(size=(int(rng.integers(1, 4)), 164)).astype(np.float32)
            features.append(x)
            seconds.append(scale * np.exp(-x.sum(0)[:4] @ weights[:4]))  # a rule of a few features
        seconds[-1] = 1e10  # one failed schedule per workload
        out.append(F.WorkloadFeatures(f"w{w}", features, np.array(seconds), key=str(w)))
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, cpu):
    return fake_corpus(tmp_path_factory.mktemp("corpus"), cpu, per_workload=14, fail_every=7)


def test_targets_are_normalised_per_workload():
    scores = F.normalized_scores(np.array([2e-3, 1e-3, 1e10, 4e-3]))
    assert scores.tolist() == pytest.approx([0.5, 1.0, 0.0, 0.25])
    assert F.normalized_scores(np.array([1e10, 1e10])).tolist() == [0.0, 0.0]


def test_rank_metrics():
    seconds = np.array([1.0, 2.0, 3.0, 4.0, 1e10])
    perfect = E.rank_metrics(-seconds, seconds, top=2)
    assert perfect == {"n": 4, "spearman": 1.0, "top2_has_best": True, "top2_ratio": 1.0}
    backwards = E.rank_metrics(seconds, seconds, top=2)
    assert backwards["spearman"] == -1.0 and backwards["top2_has_best"] is False and backwards["top2_ratio"] == 3.0
    # A constant prediction ranks nothing, and its ties are broken against it.
    flat = E.rank_metrics(np.zeros(5), seconds, top=2)
    assert flat["spearman"] == 0.0 and flat["top2_has_best"] is False
    assert E.rank_metrics(np.zeros(3), np.ones(3), top=8)["top8_ratio"] is None  # too few to rank a top 8


def test_save_load_round_trip_gives_identical_predictions(tmp_path):
    data = synthetic()
    booster = T.train(data, FAST)
    path = P.save_model(booster, tmp_path / "model.npz", {"target_kind": "llvm", "workloads": ["w0"]})
    loaded, meta = P.load_model(path)
    probe = data[0].features
    assert np.array_equal(P.predict(booster, probe), P.predict(loaded, probe))
    assert meta["target_kind"] == "llvm" and meta["extractor"] == F.EXTRACTOR and "xgboost" in meta
    # ... and in another process (the file holds no pickled objects: numpy arrays and JSON text).
    np.save(tmp_path / "probe.npy", np.concatenate(probe), allow_pickle=False)
    code = ("import numpy as np, sys; from tvm_rl.tune.cost_model import pretrained as P; "
            "b, _ = P.load_model(sys.argv[1]); "
            "x = np.load(sys.argv[2]); counts = [int(c) for c in sys.argv[3].split(',')]; "
            "parts = np.split(x, np.cumsum(counts)[:-1]); np.save(sys.argv[4], P.predict(b, parts))")
    counts = ",".join(str(len(x)) for x in probe)
    subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path / "probe.npy"), counts,
                    str(tmp_path / "out.npy")], check=True)
    assert np.array_equal(np.load(tmp_path / "out.npy"), P.predict(booster, probe))


def test_missing_or_foreign_model_files_are_named(tmp_path):
    missing = tmp_path / "nowhere" / "model.npz"
    with pytest.raises(P.PretrainedModelError, match=str(missing)):
        cost_model.create("xgb-pretrained", path=missing)
    with pytest.raises(TvmRlError, match="no pre-trained cost model is shipped for 'cuda'"):
        cost_model.create("xgb-pretrained", target_kind="cuda")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a model")
    with pytest.raises(P.PretrainedModelError, match="junk.npz is not a tvm-rl pre-trained cost model"):
        P.load_model(junk)
    other = tmp_path / "other.npz"
    np.savez(other, format=np.array("something else"), version=np.array(1))
    with pytest.raises(P.PretrainedModelError, match="other.npz"):
        P.load_model(other)


def test_the_shipped_model_is_found_by_target_kind(tmp_path, monkeypatch):
    """`create("xgb-pretrained")` with no path loads the model shipped for the target kind, and `--cost-model
    xgb-pretrained` (`from_spec`) does the same; a path still wins."""
    monkeypatch.setattr(cost_model, "SHIPPED_DIR", tmp_path)
    assert cost_model.shipped_model("llvm") is None
    assert cost_model.default("llvm") == "xgb" == cost_model.from_spec(None)  # nothing shipped: MetaSchedule's
    with pytest.raises(P.PretrainedModelError, match="no pre-trained cost model is shipped for 'llvm'"):
        cost_model.from_spec("xgb-pretrained")
    P.save_model(T.train(synthetic(), FAST), tmp_path / "cost_model_llvm.npz", {"target_kind": "llvm"})
    assert cost_model.shipped_model("llvm") == tmp_path / "cost_model_llvm.npz"
    assert cost_model.create("xgb-pretrained").path == tmp_path / "cost_model_llvm.npz"
    assert cost_model.default("llvm").path == tmp_path / "cost_model_llvm.npz"  # shipped: the default
    assert cost_model.from_spec(None).path == tmp_path / "cost_model_llvm.npz"
    assert cost_model.default("cuda") == "xgb" and cost_model.from_spec("xgb") == "xgb"
    assert cost_model.from_spec("xgb-pretrained", target_kind="llvm").path == tmp_path / "cost_model_llvm.npz"
    other = P.save_model(T.train(synthetic(seed=1), FAST), tmp_path / "mine.npz", {"target_kind": "llvm"})
    assert cost_model.from_spec(str(other)).path == other
    assert cost_model.from_spec("random").__class__.__name__ == "RandomModel"


def test_a_model_from_another_cpu_or_target_kind_is_named_once(tmp_path, caplog):
    import tvm

    booster = T.train(synthetic(n_workloads=2, per=8), FAST)
    path = P.save_model(booster, tmp_path / "model.npz",
                        {"target_kind": "llvm", "target": {"kind": "llvm", "mcpu": "znver5"}})

    def rate(mcpu: str | None, kind: str = "llvm") -> list[str]:
        target = {"kind": kind, **({"mcpu": mcpu} if mcpu else {})}
        model = P.PretrainedXGBModel(path)
        caplog.clear()
        with caplog.at_level("INFO", logger=P.logger.name):
            for _ in range(2):  # what predict and update check before rating (through MetaSchedule's FFI)
                model._check_target(ms.TuneContext(target=tvm.target.Target(target)))
        return [f"{r.levelname}: {r.getMessage()}" for r in caplog.records]

    other = rate("skylake")
    assert len(other) == 1 and other[0].startswith("INFO") and "znver5" in other[0] and "skylake" in other[0]
    assert rate("znver5") == [] and rate(None) == []  # same CPU, or none named: nothing to say
    gpu = rate(None, kind="cuda")
    assert len(gpu) == 1 and gpu[0].startswith("WARNING") and "cuda" in gpu[0]


def test_refining_adds_trees_to_a_copy():
    data = synthetic()
    base = T.train(data[1:], FAST)
    rounds = base.num_boosted_rounds()
    before = P.predict(base, data[0].features)
    refined = P.refine(base, [data[0].subset(range(8))], FAST)
    assert refined.num_boosted_rounds() == rounds + FAST.refine_rounds
    assert base.num_boosted_rounds() == rounds and np.array_equal(P.predict(base, data[0].features), before)
    assert not np.array_equal(P.predict(refined, data[0].features), before)
    assert P.refine(base, [data[0].subset([23])], FAST) is base  # only a failure: nothing to fit


def test_tuning_with_the_pretrained_model_never_imports_the_corpus_package():
    """The runtime holds an inference-only model: loading, rating and refining it need no corpus code."""
    code = ("import sys; import tvm_rl.tune.tasks, tvm_rl.tune.command, tvm_rl.tune.search_strategy.ppo; "
            "from tvm_rl.tune.cost_model import create, pretrained; "
            "print(sorted(m for m in sys.modules if m.startswith('tvm_rl.tune.corpus')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_a_model_file_is_read_once_per_process_until_it_is_rewritten(tmp_path, monkeypatch):
    path = P.save_model(T.train(synthetic(n_workloads=2, per=8), FAST), tmp_path / "model.npz", {"target_kind": "llvm"})
    reads = []
    load = P.load_model
    monkeypatch.setattr(P, "load_model", lambda p: reads.append(p) or load(p))
    a, b = P.PretrainedXGBModel(path), P.PretrainedXGBModel(tmp_path / "." / "model.npz")
    assert len(reads) == 1 and a.base is b.base and a.meta == b.meta and a.meta is not b.meta
    P.save_model(T.train(synthetic(n_workloads=2, per=8, seed=1), FAST), path, {"target_kind": "llvm", "new": 1})
    assert P.PretrainedXGBModel(path).meta["new"] == 1 and len(reads) == 2  # rewritten: read again
    with pytest.raises(P.PretrainedModelError, match="does not exist"):
        P.PretrainedXGBModel(tmp_path / "missing.npz")


def test_leave_one_workload_out_gives_a_row_per_workload():
    data = synthetic(n_workloads=4)
    result = E.evaluate(data, ks=(4, 8), top=4, config=FAST)
    assert [r["workload"] for r in result["rows"]] == ["w0", "w1", "w2", "w3"]
    row = result["rows"][0]
    assert row["trained_on"] == 3 and row["records"] == 24 and row["valid"] == 23
    assert set(row["k8"]) == {"pretrained", "cold", "refined"} and row["k8"]["cold"]["n"] == 15
    assert row["pretrained"]["n"] == 23
    assert {"pretrained (all records)", "k=4 cold", "k=8 refined"} <= set(result["summary"])
    # The hidden rule is shared, so the model trained on the other workloads ranks the held-out one.
    assert result["summary"]["pretrained (all records)"]["spearman_mean"] > 0.3
    text = E.format_table(result)
    assert "w3" in text and "k=8 refined" in text
    folds = E.evaluate(data, ks=(8,), top=4, config=FAST, folds=2, heldout=["w1", "w2"])
    assert [r["workload"] for r in folds["rows"]] == ["w1", "w2"] and folds["rows"][0]["trained_on"] == 2
    with pytest.raises(TvmRlError, match="at least 2 workloads"):
        E.evaluate(data[:1])


def test_a_given_model_is_rated_beside_and_says_which_workloads_it_saw():
    data = synthetic(n_workloads=5)
    # Trained elsewhere on two of the five workloads (one known by hash only, one by name only).
    booster = T.train([data[0], data[1]], FAST)
    meta = {"workloads": [{"name": "renamed", "structural_hash": "0"}, {"name": "w1"}], "records": 48,
            "host": {"cpu_model": "Other CPU"}, "target": {"kind": "llvm", "mcpu": "other"}}
    result = E.evaluate(data, ks=(8,), top=4, config=FAST, given=(booster, meta))
    assert [r["given_saw"] for r in result["rows"]] == [True, True, False, False, False]
    row = result["rows"][2]
    assert row["given"] == E.rank_metrics(P.predict(booster, data[2].features), data[2].seconds, 4)
    assert set(row["k8"]) == {"pretrained", "cold", "refined", "given", "given-refined"}
    assert row["k8"]["given-refined"] != row["k8"]["given"]  # refined on the workload's own first 8
    assert {"given (all records)", "k=8 given", "k=8 given-refined"} <= set(result["summary"])
    assert result["summary_unseen"]["given (all records)"]["workloads"] == 3
    assert result["given"]["records"] == 48
    text = E.format_table(result)
    assert "Other CPU (-mcpu=other), 48 schedules; it trained on 2 of these 5" in text
    assert "the 3 workloads the given model never saw:" in text and "given (unseen)" in text
    # Without a given model nothing of it appears.
    plain = E.evaluate(data[:3], ks=(8,), top=4, config=FAST)
    assert "summary_unseen" not in plain and "given (all records)" not in plain["summary"]
    assert "given" not in E.format_table(plain)


def test_cli_evaluate_against_a_model_file_or_the_shipped_one(tmp_path, corpus, capsys):
    model = tmp_path / "elsewhere.npz"
    assert corpus_main(["train", "--corpus", str(corpus.path), "--out", str(model), "--exclude", "matmul3*",
                        "--max-rounds", "30"]) == 0
    out = tmp_path / "eval.json"
    assert corpus_main(["evaluate", "--corpus", str(corpus.path), "--out", str(out), "--ks", "4", "--top", "4",
                        "--max-rounds", "30", "--model", str(model)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert [r["given_saw"] for r in result["rows"]] == [True, True, False]
    assert result["given"]["path"] == str(model) and "the 1 workloads the given model never saw" in printed
    assert corpus_main(["evaluate", "--corpus", str(corpus.path), "--out", str(out), "--ks", "4", "--top", "4",
                        "--max-rounds", "30", "--model", "shipped", "--refine-calibrated"]) == 0
    capsys.readouterr()
    shipped = json.loads(out.read_text())
    # The shipped file by its place in the package, not this machine's file system.
    assert shipped["given"]["path"] == "tvm_rl/tune/models/cost_model_llvm.npz"
    assert shipped["settings"]["config"]["refine_calibrate"] is True
    # A model for another target kind is refused before any feature is extracted, naming both kinds.
    booster, meta = P.load_model(model)
    P.save_model(booster, tmp_path / "gpu.npz", {**meta, "target_kind": "cuda"})
    with pytest.raises(TvmRlError, match="trained for target kind 'cuda', the corpus is 'llvm'"):
        corpus_main(["evaluate", "--corpus", str(corpus.path), "--model", str(tmp_path / "gpu.npz")])
    with pytest.raises(TvmRlError, match="does not exist"):
        corpus_main(["evaluate", "--corpus", str(corpus.path), "--model", str(tmp_path / "none.npz")])


def test_train_on_a_corpus_and_use_it_in_metaschedule(tmp_path, corpus, cpu):
    data = corpus_features(corpus)
    assert [d.name for d in data] == ["matmul8", "matmul16", "matmul32"]
    assert all(len(d) == 14 and len(d.valid) == 12 and d.features[0].shape[1] == 164 for d in data)
    cached = corpus_features(corpus)  # from features/<name>.npz
    assert all(np.array_equal(a.seconds, b.seconds) and all(np.array_equal(x, y) for x, y in
                                                            zip(a.features, b.features)) for a, b in zip(data, cached))
    path, meta = T.train_on_corpus(corpus, tmp_path / "model.npz", FAST)
    assert [w["name"] for w in meta["workloads"]] == ["matmul8", "matmul16", "matmul32"]
    assert meta["records"] == 42 and meta["target_kind"] == "llvm"

    model = cost_model.create("xgb-pretrained", path=path)
    records = corpus.load("matmul16")
    context = ms.TuneContext(mod=records.mod, target=cpu, task_name="matmul16")
    candidates = [r.as_measure_candidate() for r in records.records]
    first = model.predict(context, candidates)
    assert np.array_equal(first, P.predict(P.load_model(path)[0], data[1].features))
    # MetaSchedule's update: the user's records refine it, starting again from the corpus booster each time.
    results = [ms.runner.RunnerResult([s], None) for s in records.seconds[:8]]
    model.update(context, candidates[:8], results)
    assert model.data_size == 8 and not np.array_equal(model.predict(context, candidates), first)
    model.save(str(tmp_path / "refined.npz"))
    again, meta = P.load_model(tmp_path / "refined.npz")
    assert np.array_equal(P.predict(again, data[1].features), model.predict(context, candidates))
    assert list(meta["refined_on"].values()) == [8]
    # A workload the corpus never saw is rated too.
    other = ms.TuneContext(mod=matmul(24), target=cpu, space_generator="post-order-apply",
                           search_strategy=ms.search_strategy.ReplayTrace(), task_name="m24", num_threads=1)
    other.pre_tuning(max_trials=4, num_trials_per_iter=4, design_spaces=other.generate_design_space(),
                     database=None, cost_model=None)
    assert np.isfinite(model.predict(other, other.generate_measure_candidates())).all()


def test_cli_train_and_evaluate(tmp_path, corpus, capsys):
    out = tmp_path / "eval.json"
    assert corpus_main(["train", "--corpus", str(corpus.path), "--out", str(tmp_path / "m.npz"),
                        "--max-rounds", "30"]) == 0
    assert "trained on 3 workloads, 42 schedules" in capsys.readouterr().out
    assert corpus_main(["evaluate", "--corpus", str(corpus.path), "--out", str(out), "--ks", "4", "--top", "4",
                        "--max-rounds", "30"]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert [r["workload"] for r in result["rows"]] == ["matmul8", "matmul16", "matmul32"]
    assert result["workloads"] == 3 and result["target"]["kind"] == "llvm"
    assert "k=4 cold" in printed and str(out) in printed
    # With no refinement the refined arm is the pre-trained model itself.
    assert corpus_main(["evaluate", "--corpus", str(corpus.path), "--out", str(out), "--ks", "4", "--top", "4",
                        "--max-rounds", "30", "--refine-rounds", "0"]) == 0
    capsys.readouterr()
    result = json.loads(out.read_text())
    assert result["settings"]["config"]["refine_rounds"] == 0
    assert all(r["k4"]["refined"] == r["k4"]["pretrained"] for r in result["rows"])
    assert corpus_main(["train", "--corpus", str(corpus.path), "--out", str(tmp_path / "m2.npz"), "--exclude",
                        "matmul3*", "--max-rounds", "30"]) == 0
    assert "leaving out 1 of 3 workloads" in capsys.readouterr().out
    assert [w["name"] for w in P.load_model(tmp_path / "m2.npz")[1]["workloads"]] == ["matmul8", "matmul16"]
    with pytest.raises(TvmRlError, match="matches no workload"):
        corpus_main(["train", "--corpus", str(corpus.path), "--exclude", "resnet*"])


def test_tune_takes_a_model_file(tmp_path, capsys):
    from tvm_rl.cli import main as cli_main

    missing = tmp_path / "model.npz"
    assert cli_main(["tune", "--model", "resnet18", "--cost-model", str(missing), "--work-dir", str(tmp_path)]) == 2
    assert f"pre-trained cost model {missing} does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_evolutionary_search_with_the_pretrained_model(tmp_path, corpus, cpu, monkeypatch):
    """tune_workloads measures with it from the first round and refines it on every batch (at the default
    population, which the rest of the suite lowers: conftest.py)."""
    from tvm_rl.tune import tune_workloads

    monkeypatch.delenv("TVM_RL_POPULATION", raising=False)
    path, _ = T.train_on_corpus(corpus, tmp_path / "model.npz", FAST)
    model = cost_model.create("xgb-pretrained", path=path)
    _, report = tune_workloads([("mm24", matmul(24), 1.0)], cpu, tmp_path / "db", trials_per_kernel=4,
                               trials_per_iter=2, strategy="evolutionary", cost_model=model)
    assert report.measured == 4 and model.data_size == 4


def test_calibrated_refinement_maps_scores_onto_the_base_scale(monkeypatch):
    data = synthetic(n_workloads=1)[0]
    scores = F.normalized_scores(data.seconds).astype(np.float64)
    ok = scores > 0
    monkeypatch.setattr(P, "predict", lambda base, features: 3.0 * scores + 2.0)  # right order, other scale
    assert np.allclose(P._on_base_scale(None, data)[ok], 3.0 * scores[ok] + 2.0)
    # A base that ranks the workload backwards: its spread is kept, the order is the truth's.
    monkeypatch.setattr(P, "predict", lambda base, features: 5.0 - 2.0 * scores)
    mapped = P._on_base_scale(None, data)[ok]
    assert np.corrcoef(mapped, scores[ok])[0, 1] == pytest.approx(1.0)
    assert np.std(mapped) == pytest.approx(2.0 * np.std(scores[ok])) and np.mean(mapped) == pytest.approx(
        np.mean(5.0 - 2.0 * scores[ok]))


def test_calibrated_refinement_is_an_option_that_fits_other_trees():
    data = synthetic()
    base = T.train(data[1:], FAST)
    own = [data[0].subset(range(8))]
    plain = P.refine(base, own, FAST)
    calibrated = P.refine(base, own, dataclasses.replace(FAST, refine_calibrate=True))
    assert not P.TrainConfig().refine_calibrate  # off by default: docs/tuner_corpus.md says why
    assert calibrated.num_boosted_rounds() == plain.num_boosted_rounds()
    assert not np.array_equal(P.predict(calibrated, data[0].features), P.predict(plain, data[0].features))


def test_the_online_model_takes_single_settings(tmp_path, corpus, cpu):
    path, _ = T.train_on_corpus(corpus, tmp_path / "model.npz", FAST)
    frozen = cost_model.create("xgb-pretrained", path=path, refine_rounds=0)
    assert frozen.config.refine_rounds == 0 and frozen.config.max_rounds == FAST.max_rounds  # the rest: the file's
    records = corpus.load("matmul16")
    context = ms.TuneContext(mod=records.mod, target=cpu, task_name="matmul16")
    candidates = [r.as_measure_candidate() for r in records.records]
    first = frozen.predict(context, candidates)
    frozen.update(context, candidates[:8], [ms.runner.RunnerResult([s], None) for s in records.seconds[:8]])
    assert frozen.data_size == 8 and np.array_equal(frozen.predict(context, candidates), first)  # never refined
    with pytest.raises(TvmRlError, match="unknown cost model setting.*refine_speed"):
        cost_model.create("xgb-pretrained", path=path, refine_speed=2)


def test_warming_many_tasks_refits_once_and_rates_as_task_by_task_warming(tmp_path, corpus, cpu, monkeypatch):
    from tvm_rl.tune.cost_model.warm import warm, warm_tasks

    path, _ = T.train_on_corpus(corpus, tmp_path / "model.npz", FAST)
    tasks = []
    for name in ("matmul8", "matmul16", "matmul32"):
        records = corpus.load(name)
        tasks.append((ms.TuneContext(mod=records.mod, target=cpu, task_name=name), records.records[:6]))
    one_by_one = cost_model.create("xgb-pretrained", path=path)
    for context, records in tasks:
        warm(one_by_one, context, records)
    fits = []
    real = P.refine
    monkeypatch.setattr(P, "refine", lambda *a, **kw: fits.append(1) or real(*a, **kw))
    at_once = cost_model.create("xgb-pretrained", path=path)
    warm_tasks(at_once, tasks)
    assert len(fits) == 1 and at_once.data_size == one_by_one.data_size == 18
    context, records = tasks[1]
    candidates = [r.as_measure_candidate() for r in corpus.load("matmul16").records]
    assert np.array_equal(at_once.predict(context, candidates), one_by_one.predict(context, candidates))
    at_once.update(context, candidates[6:8], [ms.runner.RunnerResult([1e-3], None)] * 2)
    assert len(fits) == 2  # after the block, every update refits again
