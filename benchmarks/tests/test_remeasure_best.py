"""benchmarks/remeasure_best.py: a database's best records measured again, beside their recorded times."""
import json

from benchmarks import remeasure_best
from tests.support.kernels import matmul
from tvm_rl.tune import tune_workloads


def test_best_records_are_measured_again_and_written(cpu, tmp_path):
    tune_workloads([("mm", matmul(16), 1.0)], cpu, tmp_path / "db", trials_per_kernel=2, trials_per_iter=2,
                   strategy="random", cost_model="xgb")
    out = tmp_path / "again.json"
    assert remeasure_best.main(["--work-dir", str(tmp_path / "db"), "--min-ms", "0", "--repeats", "2",
                                "--out", str(out)]) == 0
    (kernel,) = json.loads(out.read_text())["kernels"]
    assert kernel["args"] == [[16, 16], [16, 16], [16, 16]] and kernel["recorded_ms"] > 0
    assert len(kernel["now_ms"]) == 2 and all(t > 0 for t in kernel["now_ms"])
