"""The transfer-model benchmark: kernels read from runs' databases, model folds, the arms and their summary."""
import gzip
import json
import shutil

import numpy as np
import pytest

from benchmarks import transfer_models
from benchmarks.transfer.arms import MLPArm, make_arm
from benchmarks.transfer.data import Kernel, find_databases, load_kernels
from tests.support.kernels import fake_corpus
from tvm_rl.tune.cost_model.features import WorkloadFeatures


def _synthetic(n_kernels=10, per=40, seed=0):
    """Kernels whose schedules' speed is written in their first feature (plus noise columns), 1-3 stores each."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n_kernels):
        speed = rng.uniform(0.1, 1.0, per)
        feats = []
        for s in speed:
            stores = rng.integers(1, 4)
            x = rng.uniform(0, 1, (stores, 6)).astype(np.float32)
            x[:, 0] = s / stores  # the stores' sum carries the speed
            feats.append(x)
        out.append(Kernel(WorkloadFeatures(f"k{k}", feats, 1e-3 / speed, key=str(k)), {f"m{k % 3}"}))
    return out


def test_a_model_fold_holds_out_every_kernel_that_model_ran():
    kernels = _synthetic(4)
    kernels[0].models = {"m0", "m1"}  # a kernel two models share
    folds = dict(transfer_models.folds_of(kernels, "model"))
    assert folds["m1"] == [0, 1] and folds["m0"] == [0, 3]
    assert [f for f, _ in transfer_models.folds_of(kernels, "kernel")] == ["k0", "k1", "k2", "k3"]


@pytest.mark.parametrize("arm", ["xgb", "xgb-rank", "mlp"])
def test_each_learned_arm_ranks_an_unseen_kernel_by_what_it_learned(arm):
    kernels = _synthetic()
    rows = transfer_models.evaluate(kernels, [arm, "random"], seeds=1, by="model", k=8, min_valid=8,
                                    write=lambda _: None)
    rho = {a: np.mean([r["zero-shot"]["spearman"] for r in rows if r["arm"] == a]) for a in (arm, "random")}
    assert rho[arm] > 0.6 and abs(rho["random"]) < 0.3
    assert all("online" in r for r in rows)  # 40 records: 8 to update on, 32 to rate


def test_the_mlp_scores_a_schedule_the_same_alone_or_among_others():
    # MetaSchedule's loader scales each prediction batch by its own maxima; ours by the training set's.
    kernels = _synthetic(4)
    arm = MLPArm()
    arm.epochs = 2
    arm.fit([k.data for k in kernels[:3]], seed=0)
    feats = kernels[3].data.features
    together = arm.score(feats)
    alone = np.array([arm.score([f])[0] for f in feats[:5]])
    assert np.allclose(together[:5], alone, rtol=1e-5, atol=1e-6)


def test_the_summary_compares_each_arm_with_xgb_on_the_same_kernels():
    def row(arm, kernel, ratio, seed=0):
        metrics = {"spearman": 0.5, "top8_has_best": ratio == 1.0, "top8_ratio": ratio}
        return {"fold": "m", "kernel": kernel, "arm": arm, "seed": seed, "zero-shot": metrics}

    rows = [row("xgb", "a", 1.2), row("xgb", "b", 1.0), row("mlp", "a", 1.2, 0), row("mlp", "a", 1.2, 1),
            row("mlp", "b", 1.5), row("mlp", "c", 2.0)]  # c: xgb did not rate it, so it is not compared
    summary = transfer_models.summarize(rows, ["xgb", "mlp"])
    assert summary["zero-shot mlp"]["kernels"] == 3
    assert summary["zero-shot mlp"]["vs_xgb"][0] == pytest.approx(np.sqrt(1.5), abs=1e-3)
    assert "vs_xgb" not in summary["zero-shot xgb"]
    assert "| zero-shot | mlp | 3 |" in transfer_models.format_table(summary)


@pytest.fixture(scope="module")
def runs(cpu, tmp_path_factory):
    """Two models' run folders: model A ran matmul16, model B matmul16 and matmul32 (6 records each)."""
    corpus = fake_corpus(tmp_path_factory.mktemp("corpus"), cpu, sizes=(16, 32), per_workload=6)
    root = tmp_path_factory.mktemp("runs")
    shutil.copytree(corpus.database("matmul16").path, root / "modelA" / "ours_n8_s0")
    shutil.copytree(corpus.database("matmul16").path, root / "modelB" / "ours_n8_s0")
    with (root / "modelB" / "ours_n8_s0" / "database_workload.json").open("a") as f:
        f.write(corpus.database("matmul32").workloads_path.read_text())
    with (root / "modelB" / "ours_n8_s0" / "database_tuning_record.json").open("a") as f:
        for line in corpus.database("matmul32").records_path.read_text().splitlines():
            index, entry = json.loads(line)
            f.write(json.dumps([index + 1, entry]) + "\n")
    return root


def test_kernels_from_runs_are_merged_by_workload_and_labelled_with_their_models(runs, tmp_path):
    kernels = load_kernels(find_databases([runs]), tmp_path / "cache", write=lambda _: None)
    by_records = sorted((len(k.data), sorted(k.models)) for k in kernels)
    assert by_records == [(6, ["modelB"]), (12, ["modelA", "modelB"])]
    assert all(len(k.data.features) == len(k.data) and k.data.features[0].ndim == 2 for k in kernels)
    again = load_kernels(find_databases([runs]), tmp_path / "cache", write=lambda _: print("extracted"))
    assert [k.name for k in again] == [k.name for k in kernels]  # from the cache


def test_the_command_writes_its_table_and_json(runs, tmp_path, capsys):
    out = tmp_path / "t.json.gz"
    assert transfer_models.main(["--runs", str(runs), "--arms", "xgb", "random", "--seeds", "1", "--k", "2",
                                 "--min-valid", "4", "--cache", str(tmp_path / "c"), "--out", str(out)]) == 0
    result = json.loads(gzip.decompress(out.read_bytes()))
    # Model B ran both kernels: holding it out leaves nothing to train on.
    assert {r["fold"] for r in result["rows"]} == {"modelA"}
    text = capsys.readouterr().out
    assert "zero-shot random" in result["summary"] and "| view | arm |" in text
    assert "fold modelB: every kernel is held out, nothing to train on (skipped)" in text
    with pytest.raises(SystemExit):
        make_arm("nope")
