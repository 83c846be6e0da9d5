"""The learned allocator's offline judgement (benchmarks/batch_gain.py): leave one model out, then one model fitted."""
import json

from benchmarks import batch_gain
from tests.support.kernels import fake_tuning_run
from tvm_rl.measure import host_cpu_target
from tvm_rl.tune.batch_gain import GainModel


def test_each_model_is_judged_by_a_model_fitted_on_the_others_and_metaschedule_runs_are_left_out(tmp_path):
    target = host_cpu_target()
    curve = [4e-3] * 8 + [3e-3] * 8 + [2e-3] * 8 + [2e-3] * 8  # four batches of 8: three transitions
    for model in ("mobilenet_v2", "resnet18"):
        fake_tuning_run(tmp_path / model / "budget-optimize-nhwc_n256_s0", target, {8: curve, 16: curve})
    # MetaSchedule tunes in batches of 64: its runs are not curves of batches of 8
    fake_tuning_run(tmp_path / "resnet18" / "budget-ms-static_n256_s0", target, {8: curve})
    out, model_out = tmp_path / "gain.json", tmp_path / "model.json"
    assert batch_gain.main(["--runs", str(tmp_path), "--out", str(out), "--model-out", str(model_out),
                            "--exclude-models", "resnet18"]) == 0
    result = json.loads(out.read_text())
    assert len(result["folders"]) == 2 and not any("ms-static" in f for f in result["folders"])
    assert set(result["leave_one_model_out"]) == {"mobilenet_v2", "resnet18"}
    assert result["leave_one_model_out"]["resnet18"]["transitions"] == 6
    assert result["fitted"]["models"] == {"mobilenet_v2": 2} and result["fitted"]["transitions"] == 6
    assert GainModel.load(model_out).predict([[0.0, 0.0, 0.0, 3.0, -2.4]]).shape == (1,)
