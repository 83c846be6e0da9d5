"""The learned allocator: tuning curves read in measurement order, the gain model, and how the scheduler uses it."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from tests.support.kernels import fake_tuning_run, matmul
from tvm_rl.errors import TvmRlError
from tvm_rl.tune.batch_gain import FEATURES, GainModel, features, open_gain_model, shipped_gain_model
from tvm_rl.tune.task_scheduler import LatencyShare, untuned_seconds
from tvm_rl.tune.tuning_curves import Curve, fit_gain_model, read_curves, transitions


def test_a_curve_is_the_best_after_each_full_batch_in_measurement_order(cpu, tmp_path):
    folder = fake_tuning_run(tmp_path, cpu, {16: [1e10, 1e10, 4e-3, 5e-3, 3e-3, 6e-3, 1e-3],  # last batch partial
                                     8: [1e10, 1e10, 1e10]})  # never valid: no curve
    (curve,) = read_curves(folder, batch=2)
    assert curve.bests == (4e-3, 3e-3)  # the failed first batch starts nothing; the partial 1 ms is left out
    assert curve.untuned == pytest.approx(untuned_seconds(matmul(16)))


def test_a_folder_that_is_not_a_tuning_run_is_named(cpu, tmp_path):
    with pytest.raises(TvmRlError, match="holds no tuning records"):
        read_curves(tmp_path)
    folder = fake_tuning_run(tmp_path / "run", cpu, {16: [1e-3, 2e-3]})
    with open(folder / "database_tuning_record.json", "a") as f:
        f.write('[0, "not a record"]\n')
    with pytest.raises(TvmRlError, match="database_tuning_record.json"):
        read_curves(folder)


def test_features_say_what_the_last_batch_and_the_whole_run_gained():
    row = dict(zip(FEATURES, features([4e-3, 2e-3, 1e-3], 1.0)))
    assert row["log2_batches"] == pytest.approx(math.log2(3))
    assert row["last_gain"] == pytest.approx(0.5) and row["total_gain"] == pytest.approx(0.75)
    assert row["log10_speedup"] == pytest.approx(3.0) and row["log10_best"] == pytest.approx(-3.0)
    x, y = transitions([Curve("c", 1.0, (4e-3, 2e-3, 1e-3)), Curve("d", 1.0, (1e-3,))])
    assert x.shape == (2, len(FEATURES)) and list(y) == pytest.approx([0.5, 0.5])


def _curves():
    """Kernels far from their untuned time (fast already) stall; those close to it keep gaining 30% a batch."""
    rng = np.random.default_rng(0)
    curves = []
    for i in range(60):
        fast = i % 2 == 0
        best, bests = (1e-4 if fast else 1e-1) * (1 + rng.random()), []
        for _ in range(4):
            bests.append(best)
            best *= 1.0 if fast else 0.7
        curves.append(Curve(f"k{i}", 1.0, tuple(bests)))
    return curves


def test_the_model_learns_which_kernels_still_gain_and_survives_a_round_trip(tmp_path):
    model = fit_gain_model(_curves())
    stalled, gaining = model.predict([features([1e-4], 1.0), features([1e-1], 1.0)])
    assert stalled < 0.05 and gaining > 0.2
    model.save(tmp_path / "gain.json")
    again = GainModel.load(tmp_path / "gain.json")
    assert again.meta["curves"] == 60
    assert np.allclose(again.predict([features([1e-1], 1.0)]), model.predict([features([1e-1], 1.0)]))


@pytest.mark.parametrize("content, message", [("not json", "cannot read"),
                                              ('{"format": "something else"}', "is not a tvm-rl batch gain model")])
def test_a_bad_gain_model_file_is_named(tmp_path, content, message):
    path = tmp_path / "gain.json"
    path.write_text(content)
    with pytest.raises(TvmRlError, match=message) as err:
        open_gain_model(path, "llvm")
    assert "gain.json" in str(err.value)


def test_none_means_the_rule_and_shipped_is_the_packages_model():
    assert open_gain_model(None, "llvm") is None
    assert shipped_gain_model("llvm") is not None
    assert isinstance(open_gain_model("shipped", "llvm"), GainModel)
    with pytest.raises(TvmRlError, match="no gain model ships for target kind 'cuda'"):
        open_gain_model("shipped", "cuda")


class _Fixed(GainModel):
    """A gain model that expects `gains[i]` of the kernel whose best latency is `bests[i]`."""

    def __init__(self, gains: dict[float, float]) -> None:
        super().__init__(None)
        self.gains = gains

    def predict(self, rows):
        return np.asarray([self.gains[round(10 ** row[FEATURES.index("log10_best")], 9)] for row in rows])


def _result(seconds):
    return SimpleNamespace(error_msg=None, run_secs=[seconds])


def test_the_scheduler_ranks_measured_kernels_by_best_times_expected_gain():
    rule = LatencyShare([1.0, 1.0])
    learned = LatencyShare([1.0, 1.0], gain_model=_Fixed({2e-3: 0.01, 1e-3: 0.5}))
    for share in (rule, learned):
        share.observe(0, [_result(2e-3)])
        share.observe(1, [_result(1e-3)])
    assert rule.choose([0, 1], [1.0, 1.0]) == 0  # the rule: 0.8 x best / batches, the slower kernel first
    assert learned.choose([0, 1], [1.0, 1.0]) == 1  # 1 ms x 0.5 saves more than 2 ms x 0.01
    assert learned.choose([0, 1], [100.0, 1.0]) == 0  # unless the other runs 100 times per model run


def test_an_unmeasured_kernel_keeps_its_untuned_estimate_beside_the_model():
    for gain, chosen in ((0.01, 1), (0.1, 0)):
        learned = LatencyShare([1e-2, 1e-4], gain_model=_Fixed({2e-3: gain}))
        learned.observe(0, [_result(2e-3)])
        assert learned.choose([0, 1], [1.0, 1.0]) == chosen  # 2 ms x gain against 0.1 ms untuned
