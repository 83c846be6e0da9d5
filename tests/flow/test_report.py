"""`tvm-rl report` reads what the other commands leave in a work dir."""
import json

from tvm_rl import cli
from tvm_rl.report import report


def _work_dir(tmp_path):
    (tmp_path / "optimize_net.json").write_text(json.dumps({
        "model": "net", "target": "llvm -keys=cpu", "default_ms": 2.0, "optimized_ms": 0.5,
        "graph_rewrites": ["fold_batchnorm: fold a into b"], "kernels_tuned": 3, "trials_measured": 48,
        "seconds": {"rewrite": 1.0, "tune": 30.0}}))
    db = tmp_path / "tuning" / "llvm"
    db.mkdir(parents=True)
    (db / "database_workload.json").write_text("w1\nw2\n")
    (db / "database_tuning_record.json").write_text("r\n" * 5)
    run = tmp_path / "graph_train" / "mine"
    run.mkdir(parents=True)
    (run / "train.csv").write_text("iteration,mean_return,mean_speedup\n1,0.5,1.01\n2,2.25,1.04\n")
    (tmp_path / "graph_search_llvm_tiny.json").write_text(json.dumps({"models": {"bert": {
        "original": {"latency_ms": 1.0, "speedup": 1.0}, "greedy": {"latency_ms": 0.8, "speedup": 1.25}}}}))
    (tmp_path / "graph_rl_llvm_tiny.json").write_text("{ cut short")  # a half-written file is skipped
    return tmp_path


def test_report_has_a_section_per_artefact(tmp_path):
    text = report(_work_dir(tmp_path))
    assert "| net | llvm | 2.000 | 0.500 | 4.00x | 1 | 3 | 48 | 31 |" in text
    assert "| tuning/llvm | 2 | 5 | 0 |" in text
    assert "| graph_train/mine | 2 | 2.250 | 1.040 |" in text
    assert "| bert | 1.000 (1.00x) | 0.800 (1.25x) |" in text
    assert "graph_rl_llvm_tiny" not in text
    assert (tmp_path / "report_speedups.png").stat().st_size > 0


def test_cli_writes_report_md_and_names_a_missing_work_dir(tmp_path, capsys):
    assert cli.main(["report", "--work-dir", str(_work_dir(tmp_path)), "--no-plots"]) == 0
    assert "## Optimized models" in (tmp_path / "report.md").read_text()
    assert cli.main(["report", "--work-dir", str(tmp_path / "nowhere")]) == 2
    assert "no work dir" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "Nothing to report" in report(empty)


def test_an_end_to_end_tuner_json_gets_its_own_table_not_the_kernel_benchmarks(tmp_path):
    run = {"arm": "evolutionary", "trials": 32, "seed": 0, "label": "evolutionary", "tuning_s": 300.0,
           "measurements": 200}
    variants = {"TVM default": {"ms": 900.0}, "evolutionary/N32/s0": {"ms": 110.0, "correct": True},
                "PyTorch": {"ms": 95.0}, "ORT": {"ms": 44.0}}
    (tmp_path / "tuner_e2e_llvm.json").write_text(json.dumps({
        "settings": {"size": "full", "target_name": "llvm"},
        "models": {"bert": {"runs": {"evolutionary/N32/s0": run},
                            "timing": {"variants": variants, "passes": 5, "seconds": 60.0}},
                   "resnet18": {"runs": {}}}}))  # tuned, not timed yet: no table
    text = report(tmp_path, plots=False)
    assert text.count("### ") == 1 and "Whole models tuned end to end" in text
    assert "Schedule tuner (`benchmarks/tuner.py`)" not in text
    row = next(line for line in text.splitlines() if line.startswith("evolutionary"))
    assert row.split()[:4] == ["evolutionary", "32", "110.000", "8.18x"]
    assert "resnet18" not in text
