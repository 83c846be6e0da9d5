"""benchmarks/report.py: each benchmark JSON as its table; half-written files skipped."""
import gzip
import json

from benchmarks.report import report


def test_graph_benchmark_json_gets_a_table_and_a_cut_short_file_is_skipped(tmp_path):
    (tmp_path / "graph_search_llvm_tiny.json").write_text(json.dumps({"models": {"bert": {
        "original": {"latency_ms": 1.0, "speedup": 1.0}, "greedy": {"latency_ms": 0.8, "speedup": 1.25}}}}))
    (tmp_path / "graph_rl_llvm_tiny.json").write_text("{ cut short")  # a half-written file is skipped
    text = report(tmp_path)
    assert "| bert | 1.000 (1.00x) | 0.800 (1.25x) |" in text
    assert "graph_rl_llvm_tiny" not in text


def test_a_gzipped_benchmark_json_is_reported_under_its_plain_name(tmp_path):
    data = {"models": {"vit": {"original": {"latency_ms": 2.0, "speedup": 1.0}}}}
    with gzip.open(tmp_path / "graph_search_llvm_full.json.gz", "wt") as f:
        json.dump(data, f)
    text = report(tmp_path)
    assert "`graph_search_llvm_full.json`" in text and "| vit | 2.000 (1.00x) |" in text


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
    text = report(tmp_path)
    assert text.count("### ") == 1 and "Whole models tuned end to end" in text
    assert "Schedule tuner (`benchmarks/tuner.py`)" not in text
    row = next(line for line in text.splitlines() if line.startswith("evolutionary"))
    assert row.split()[:4] == ["evolutionary", "32", "110.000", "8.18x"]
    assert "resnet18" not in text


def test_a_pair_stability_json_is_not_taken_for_a_tuner_benchmark(tmp_path):
    (tmp_path / "tuner_pair_stability_llvm.json").write_text(json.dumps({"runs": 12, "pairs": {}}))
    assert "No benchmark JSON" in report(tmp_path)

