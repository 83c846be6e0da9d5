"""The end-to-end benchmark's `transformers` models (benchmarks/e2e/hf.py) and its Inductor reference."""
import numpy as np
import pytest
import torch

from benchmarks import baseline
from benchmarks.e2e import hf
from benchmarks.e2e import run as e2e
from tvm_rl import models


def entry(inductor_ms: float | None = 3.0):
    run = {"arm": "budget-ours", "trials": 128, "seed": 0, "label": "budget-ours", "tuning_s": 60.0,
           "measurements": 128}
    variants = {"TVM default": {"ms": 10.0}, "budget-ours/N128/s0": {"ms": 4.0, "correct": True},
                "PyTorch": {"ms": 6.0}, "ORT": {"ms": 2.0}}
    if inductor_ms is not None:
        variants["Inductor"] = {"ms": inductor_ms, "compile_s": 30.0}
    return {"runs": {"budget-ours/N128/s0": run}, "timing": {"variants": variants, "passes": 5, "seconds": 9.0}}


def test_inductor_gets_a_row_after_eager_and_the_tuned_builds_a_ratio_against_it():
    rows = {r["variant"]: r for r in e2e.table_rows(entry())}
    assert list(rows) == ["TVM default", "budget-ours", "PyTorch", "Inductor", "ORT"]
    assert rows["budget-ours"]["vs_inductor"] == pytest.approx(3.0 / 4.0)
    assert rows["TVM default"]["vs_inductor"] == pytest.approx(0.3)
    assert all(rows[k]["vs_inductor"] is None and rows[k]["vs_torch"] is None for k in ("PyTorch", "Inductor", "ORT"))
    line = next(x for x in e2e.format_table("m", entry(), {"size": "full", "target_name": "llvm"}).splitlines()
                if x.startswith("budget-ours"))
    assert line.split()[-3:] == ["1.50x", "0.75x", "0.50x"]  # vs PyTorch, vs Inductor, vs ORT


def test_without_inductor_the_table_keeps_its_columns():
    text = e2e.format_table("m", entry(None), {"size": "full", "target_name": "llvm"})
    assert "Inductor" not in text
    assert [r["variant"] for r in e2e.table_rows(entry(None))][-2:] == ["PyTorch", "ORT"]


def test_a_build_slower_than_a_pass_budget_is_timed_once_per_pass():
    assert e2e.timing_plan(30.0, 4.0) == (1, 0)  # naive loops of a large model: one run a pass
    assert e2e.timing_plan(0.5, 4.0) == (8, 1)
    assert e2e.timing_plan(1e-4, 4.0) == (30, 1)


def test_hf_models_load_by_name_beside_the_zoo_and_match_pytorch():
    pytest.importorskip("transformers")
    m = hf.load_model("hf-llama-block", "tiny")
    assert m.name == "hf-llama-block" and m.inputs[0].shape == (1, 16) and m.inputs[0].max() > 1  # real token ids
    assert "R.matmul" in m.mod.script() and len(m.reference_outputs()) == 1
    assert hf.load_model("resnet18", "tiny").name == models.load("resnet18", "tiny").name
    with pytest.raises(SystemExit, match="unknown no-such-model; known: .*resnet18.* hf-bert-base"):
        e2e.main(["--models", "no-such-model", "--size", "tiny"])


@pytest.mark.slow
def test_inductor_timer_compiles_once_and_times_every_call():
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU()).eval()
    model = models.Model("mlp", None, [np.ones((4, 16), "float32")], None, net)
    timer = baseline.InductorTimer(model, "cpu", threads=1)
    assert timer() > 0
    compiled, compile_s = timer.compiled, timer.compile_s
    assert compile_s is not None and compile_s > 0
    assert timer() > 0 and timer.compiled is compiled and timer.compile_s == compile_s  # compiled once
